//go:build linux

package isolation

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// DiskUse adds the disk space of what lies under root, on root's own file
// system, to the counter that by gives the owner's uid (nil: not
// counted): the blocks a file holds, so a sparse file counts what it
// takes, not what it announces. Links are not followed, other mounts not
// entered, and a file removed meanwhile is skipped. It returns root's
// file system (its st_dev); a missing root holds nothing. The disk
// watchdog (worker/diskwatch.go) counts a run's dirs with it, and what
// dynamic uids keep in the shared temporary dirs.
func DiskUse(root string, by func(uid uint32) *int64) (dev uint64, err error) {
	fd, st, err := openRoot(root, "measure the disk use of")
	if err != nil || fd < 0 {
		return 0, err
	}
	if n := by(st.Uid); n != nil {
		*n += st.Blocks * 512
	}
	u := diskUser{by: by, dev: uint64(st.Dev)}
	u.dir(fd, root, 0) // closes fd
	return u.dev, u.err
}

type diskUser struct {
	by  func(uid uint32) *int64
	dev uint64
	err error
}

func (u *diskUser) dir(fd int, path string, depth int) {
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil && u.err == nil {
		u.err = fmt.Errorf("cannot list %s: %w", path, err)
	}
	for _, name := range names {
		var st unix.Statx_t
		if err := unix.Statx(fd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, unix.STATX_TYPE|unix.STATX_UID|unix.STATX_BLOCKS, &st); err != nil {
			continue // gone since the listing
		}
		if unix.Mkdev(st.Dev_major, st.Dev_minor) != u.dev || st.Attributes&st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
			continue
		}
		if n := u.by(st.Uid); n != nil {
			*n += int64(st.Blocks) * 512
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || depth >= maxLeftoverDepth {
			continue
		}
		if sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
			u.dir(sub, path+"/"+name, depth+1)
		}
	}
}

// FileSystem names the file system of path (its st_dev), the space an
// unprivileged user may still write on it and its size, in bytes.
func FileSystem(path string) (dev uint64, free, size int64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, 0, fmt.Errorf("cannot read the free space of %s: %w", path, err)
	}
	var s unix.Statfs_t
	if err := unix.Statfs(path, &s); err != nil {
		return 0, 0, 0, fmt.Errorf("cannot read the free space of %s: %w", path, err)
	}
	return uint64(st.Dev), int64(s.Bavail) * s.Bsize, int64(s.Blocks) * s.Bsize, nil
}
