"""placeholder, replaced by the real helper"""
