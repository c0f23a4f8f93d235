package isolation

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// sharedScratch are the machine's directories every uid may write, whose
// top-level entries a dynamic uid's run left are removed when the uid is
// released (issue 25): a later run under the same uid would read them.
var sharedScratch = []string{"/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue"}

// RemoveLeftovers removes what a dynamic uid's run left outside its dirs:
// the entries of the shared scratch dirs (roots) it owns, at their top
// level only (those dirs are root's and sticky, so nobody can swap a path
// under the removal; what it put inside another's directory stays), and its
// System V shared memory, message queues and semaphores. Call it once no
// process of the uid is left. It returns how many it removed.
func RemoveLeftovers(uid uint32, roots []string) (int, error) {
	n := 0
	var errs []error
	for _, root := range roots {
		ents, err := os.ReadDir(root)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range ents {
			p := filepath.Join(root, e.Name())
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil || st.Uid != uid {
				continue
			}
			if err := os.RemoveAll(p); err != nil { // follows no link
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	for _, k := range []struct {
		table string
		rm    func(id int) error
	}{
		{"shm", func(id int) error { _, err := unix.SysvShmCtl(id, unix.IPC_RMID, nil); return err }},
		{"msg", func(id int) error { return ipcErr(unix.Syscall(unix.SYS_MSGCTL, uintptr(id), unix.IPC_RMID, 0)) }},
		{"sem", func(id int) error { return ipcErr(unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), 0, unix.IPC_RMID, 0, 0, 0)) }},
	} {
		ids, err := sysvOf(k.table, uid)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, id := range ids {
			if err := k.rm(id); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.EIDRM) {
				errs = append(errs, fmt.Errorf("cannot remove System V %s %d: %w", k.table, id, err))
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}

func ipcErr(_, _ uintptr, e syscall.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}

// sysvOf lists the ids of /proc/sysvipc/<table> whose owner or creator is
// uid.
func sysvOf(table string, uid uint32) ([]int, error) {
	f, err := os.Open("/proc/sysvipc/" + table)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil // no System V IPC in this kernel
		}
		return nil, err
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
	idCol, uidCol, cuidCol := 1, col["uid"], col["cuid"]
	if uidCol == 0 || cuidCol == 0 {
		return nil, fmt.Errorf("cannot read /proc/sysvipc/%s: no uid column", table)
	}
	want := strconv.FormatUint(uint64(uid), 10)
	var ids []int
	for sc.Scan() {
		row := strings.Fields(sc.Text())
		if len(row) <= max(uidCol, cuidCol) || (row[uidCol] != want && row[cuidCol] != want) {
			continue
		}
		if id, err := strconv.Atoi(row[idCol]); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, sc.Err()
}
