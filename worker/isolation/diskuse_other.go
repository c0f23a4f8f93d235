//go:build !linux

package isolation

import "errors"

// DiskUse and FileSystem need Linux's statx and statfs; the disk watchdog
// (worker/diskwatch.go) watches nothing elsewhere.
func DiskUse(root string, by func(uid uint32) *int64) (dev uint64, err error) {
	return 0, errors.ErrUnsupported
}

func FileSystem(path string) (dev uint64, free, size int64, err error) {
	return 0, 0, 0, errors.ErrUnsupported
}
