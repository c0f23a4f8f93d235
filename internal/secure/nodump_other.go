//go:build !linux

package secure

// NoDump is a no-op outside Linux, which has no PR_SET_DUMPABLE.
func NoDump() error { return nil }
