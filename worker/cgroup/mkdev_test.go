package cgroup

import "golang.org/x/sys/unix"

func unixMkdev(major, minor uint32) uint64 { return unix.Mkdev(major, minor) }
