//go:build linux

package isolation

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// UIDProcesses lists the live (not zombie) processes of which any of the
// real, effective, saved or filesystem uids is uid. It reads
// /proc/<pid>/status, which shows the uids even of a process that made itself
// non-dumpable (whose /proc entry then belongs to root).
func UIDProcesses(uid uint32) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("cannot list processes: %w", err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if procHasUID(pid, uid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// procHasUID reports whether pid is alive, not a zombie, and runs under uid.
func procHasUID(pid int, uid uint32) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return false // gone
	}
	want := []byte(strconv.FormatUint(uint64(uid), 10))
	match, zombie := false, false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		if v, ok := bytes.CutPrefix(line, []byte("State:")); ok {
			f := bytes.Fields(v)
			zombie = len(f) > 0 && (f[0][0] == 'Z' || f[0][0] == 'X')
		} else if v, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
			for _, f := range bytes.Fields(v) {
				if bytes.Equal(f, want) {
					match = true
				}
			}
		}
	}
	return match && !zombie
}

// KillUID SIGKILLs every process of uid until none is left or timeout
// passes; it returns how many were left then. Each process is signalled
// through a pidfd opened before its uid is checked again, so a pid reused by
// another process between the scan and the kill is never hit.
func KillUID(uid uint32, timeout time.Duration) (killed, left int, err error) {
	deadline := time.Now().Add(timeout)
	for {
		pids, err := UIDProcesses(uid)
		if err != nil || len(pids) == 0 {
			return killed, len(pids), err
		}
		if time.Now().After(deadline) {
			return killed, len(pids), nil
		}
		var fds []unix.PollFd
		for _, pid := range pids {
			fd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				continue // gone already
			}
			if !procHasUID(pid, uid) || unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) != nil {
				unix.Close(fd)
				continue
			}
			killed++
			fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		}
		// A pidfd turns readable when its process exits: wait for them,
		// then look again for processes they forked meanwhile.
		waitPidfds(fds, min(time.Until(deadline), time.Second))
		for _, p := range fds {
			unix.Close(int(p.Fd))
		}
	}
}

// waitPidfds waits until every pidfd is readable (its process exited) or d passes.
func waitPidfds(fds []unix.PollFd, d time.Duration) {
	end := time.Now().Add(d)
	for len(fds) > 0 {
		ms := int(time.Until(end).Milliseconds())
		if ms <= 0 {
			return
		}
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		rest := fds[:0]
		for _, p := range fds {
			if p.Revents == 0 {
				rest = append(rest, p)
			}
		}
		fds = rest
	}
}

// uidsMapped refuses a range of which some uid is not mapped into this
// process's user namespace (a worker that is "root" in a container with a
// small subordinate range): setuid to it would fail at every start.
func uidsMapped(r UIDRange) error {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return nil // no user namespaces: every uid exists
	}
	return uidsMappedIn(r, b)
}

// uidsMappedIn is uidsMapped for the uid_map contents b.
func uidsMappedIn(r UIDRange, b []byte) error {
	// Each line maps [inside, inside+count); the extents do not overlap.
	next := uint64(r.First)
	for next <= uint64(r.Last) {
		found := false
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := bytes.Fields(sc.Bytes())
			if len(f) != 3 {
				continue
			}
			inside, err1 := strconv.ParseUint(string(f[0]), 10, 64)
			count, err2 := strconv.ParseUint(string(f[2]), 10, 64)
			if err1 == nil && err2 == nil && inside <= next && next < inside+count {
				next, found = inside+count, true
				break
			}
		}
		if !found {
			return fmt.Errorf("uid %d of RUN_UID_RANGE %s is not mapped in this user namespace (/proc/self/uid_map): pick a range inside the mapped uids", next, r)
		}
	}
	return nil
}
