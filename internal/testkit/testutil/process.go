package testutil

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// NeedRoot skips a test that starts processes under other uids unless it
// runs as root; under CI=true, which runs as root, it fails instead.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root: runs under their own uids must be tested there")
		}
		t.Skip("runs under their own uids need a worker running as root")
	}
}

// GroupGone reports whether no live process is left in process group pgid:
// kill(-pgid, 0) fails with ESRCH, or (where init is slow to reap orphans)
// every member is a zombie.
func GroupGone(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	if err == syscall.ESRCH {
		return true
	}
	if err != nil {
		return false
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // state, ppid, pgrp, ...
		if len(f) < 3 {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid && f[0] != "Z" && f[0] != "X" {
			return false
		}
	}
	return true
}

// WaitGroupGone waits up to d for process group pgid to be gone (GroupGone).
func WaitGroupGone(t testing.TB, pgid int, d time.Duration) {
	t.Helper()
	WaitFor(t, d, "process group "+strconv.Itoa(pgid)+" to be gone", func() bool { return GroupGone(pgid) })
}
