//go:build linux

package isolation

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// What a dynamic uid leaves outside its run's dirs, for the next run that
// gets the uid to find: files in the machine's shared temporary dirs and
// SysV IPC objects (issue 25). RemoveLeftovers removes them once the uid's
// processes are gone, before the uid is free again.

// leftoverRoots are the shared dirs every uid may write: the temporary dirs,
// POSIX shared memory and message queues.
var leftoverRoots = []string{"/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue"}

// maxLeftoverDepth bounds the directories RemoveLeftovers descends.
const maxLeftoverDepth = 128

// RemoveLeftovers removes what uid left in leftoverRoots and its SysV IPC objects:
// every file, link and directory it owns (a directory only once empty:
// another uid's file in it stays), found without following a symbolic link
// nor crossing into another mount, descending only into directories uid
// could enter and not into another owner's drop box (canEnter); and every shared memory segment, semaphore set and message
// queue of which it is the owner or the creator. Only for a uid no process
// runs under any more. It returns how many it removed, and the first error
// of the ones it could not.
func RemoveLeftovers(uid uint32) (removed int, err error) {
	note := func(e error) {
		if err == nil && e != nil {
			err = e
		}
	}
	for _, root := range leftoverRoots {
		n, e := removeUnder(root, uid)
		removed += n
		note(e)
	}
	n, e := removeIPC(uid)
	removed += n
	note(e)
	return removed, err
}

// removeUnder removes what uid left in root, one of leftoverRoots; a
// missing one holds none.
func removeUnder(root string, uid uint32) (int, error) {
	fd, st, err := openRoot(root, "remove what a uid left in")
	if err != nil || fd < 0 {
		return 0, err
	}
	s := remover{uid: uid, dev: uint64(st.Dev)}
	s.dir(fd, root, 0) // closes fd
	return s.removed, s.err
}

// openRoot opens the directory root, not following a link, with its
// stat; fd -1 and no error when it does not exist. what names the work
// for the error.
func openRoot(root, what string) (fd int, st unix.Stat_t, err error) {
	fd, err = unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return -1, st, nil
	}
	if err != nil {
		return -1, st, fmt.Errorf("cannot %s %s: %w", what, root, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, fmt.Errorf("cannot %s %s: %w", what, root, err)
	}
	return fd, st, nil
}

type remover struct {
	uid     uint32
	dev     uint64 // the root's file system: never left
	removed int
	err     error
}

// dir removes what s.uid owns in the directory fd (path for messages) and
// closes fd.
func (s *remover) dir(fd int, path string, depth int) {
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		s.fail(fmt.Errorf("cannot list %s: %w", path, err))
	}
	for _, name := range names {
		var st unix.Statx_t
		if err := unix.Statx(fd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, unix.STATX_TYPE|unix.STATX_MODE|unix.STATX_UID|unix.STATX_GID, &st); err != nil {
			continue // gone since the listing
		}
		mine := st.Uid == s.uid
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if mine {
				s.unlink(fd, name, path, 0)
			}
			continue
		}
		if depth >= maxLeftoverDepth || st.Attributes&st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 ||
			unix.Mkdev(st.Dev_major, st.Dev_minor) != s.dev || !(mine || s.canEnter(&st)) {
			continue
		}
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // replaced since the stat
		}
		var sst unix.Stat_t
		if err := unix.Fstat(sub, &sst); err != nil || uint64(sst.Dev) != s.dev {
			unix.Close(sub)
			continue
		}
		s.dir(sub, path+"/"+name, depth+1)
		if mine {
			s.unlink(fd, name, path, unix.AT_REMOVEDIR)
		}
	}
}

// canEnter reports whether s.uid, whose gid is the same number and who has
// no other group, may search the directory st of another owner (only
// beneath such a one can it have made anything), unless st is a drop box:
// world-writable without the sticky bit, which its owner made for every
// uid to leave files in for others (any uid may replace or remove them
// there anyway), unlike a shared temporary dir (sticky, as /tmp is).
func (s *remover) canEnter(st *unix.Statx_t) bool {
	if st.Mode&0o002 != 0 && st.Mode&unix.S_ISVTX == 0 {
		return false
	}
	if st.Gid == s.uid {
		return st.Mode&0o010 != 0
	}
	return st.Mode&0o001 != 0
}

func (s *remover) unlink(fd int, name, path string, flags int) {
	err := unix.Unlinkat(fd, name, flags)
	switch {
	case err == nil:
		s.removed++
	case flags == unix.AT_REMOVEDIR && (errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST)):
		// another uid's file is in it, and stays
	case !errors.Is(err, unix.ENOENT):
		s.fail(fmt.Errorf("cannot remove %s/%s: %w", path, name, err))
	}
}

func (s *remover) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// sysvIPC are /proc/sysvipc's tables: the column of an object's id, and
// how one is removed.
var sysvIPC = []struct {
	table, idCol string
	rm           func(id int) error
}{
	{"shm", "shmid", func(id int) error { _, err := unix.SysvShmCtl(id, unix.IPC_RMID, nil); return err }},
	{"sem", "semid", func(id int) error { return rawErr(unix.Syscall(unix.SYS_SEMCTL, uintptr(id), 0, unix.IPC_RMID)) }},
	{"msg", "msqid", func(id int) error { return rawErr(unix.Syscall(unix.SYS_MSGCTL, uintptr(id), unix.IPC_RMID, 0)) }},
}

func rawErr(_, _ uintptr, e unix.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}

// removeIPC removes the SysV IPC objects uid owns or created, as
// /proc/sysvipc lists them (the worker's IPC namespace, which its runs
// share).
func removeIPC(uid uint32) (removed int, err error) {
	want := strconv.FormatUint(uint64(uid), 10)
	for _, t := range sysvIPC {
		ids, e := ipcObjects("/proc/sysvipc/"+t.table, t.idCol, want)
		if e != nil && err == nil {
			err = e
		}
		for _, id := range ids {
			switch e := t.rm(id); {
			case e == nil:
				removed++
			case errors.Is(e, unix.EINVAL) || errors.Is(e, unix.EIDRM): // gone meanwhile
			case err == nil:
				err = fmt.Errorf("cannot remove SysV %s %d of uid %s: %w", t.table, id, want, e)
			}
		}
	}
	return removed, err
}

// ipcObjects lists the ids (column idCol) of the objects of a
// /proc/sysvipc table whose uid or cuid is uid. A missing table (no SysV
// IPC in this kernel) has none.
func ipcObjects(table, idCol, uid string) ([]int, error) {
	f, err := os.Open(table)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot list SysV IPC objects: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return nil, sc.Err()
	}
	col := map[string]int{}
	for i, h := range strings.Fields(sc.Text()) {
		col[h] = i
	}
	iID, ok1 := col[idCol]
	iUID, ok2 := col["uid"]
	iCUID, ok3 := col["cuid"]
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("cannot read %s: no %s, uid and cuid columns in %q", table, idCol, sc.Text())
	}
	var ids []int
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) <= max(iID, iUID, iCUID) || (fs[iUID] != uid && fs[iCUID] != uid) {
			continue
		}
		if id, err := strconv.Atoi(fs[iID]); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, sc.Err()
}
