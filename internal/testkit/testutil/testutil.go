// Package testutil holds the helpers that tests of several packages share,
// each written once: a temp dir that runs under uids of their own can enter,
// and polling until a condition holds. It is imported by tests only, and it
// never sleeps to let something happen: every wait is a poll of a condition
// (Eventually, WaitFor, Poll) with a deadline.
package testutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ReachableTempDir is a t.TempDir that runs under uids of their own can
// enter (t.TempDir's parent is mode 0700): the data dir of a worker run as
// root, or a dir holding one.
func ReachableTempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Eventually polls cond every 20 ms until it reports true, failing t with
// cond's last description once timeout has passed. The one "poll until" of
// the tests: no test sleeps for a fixed time to let something happen.
func Eventually(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	var why string
	if !Poll(timeout, 20*time.Millisecond, func() bool {
		var ok bool
		ok, why = cond()
		return ok
	}) {
		t.Fatalf("not within %v: %s", timeout, why)
	}
}

// WaitFor is Eventually for a condition described once, by what.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, func() (bool, string) { return cond(), what })
}

// Poll is the loop under Eventually, for the waits that must not fail the
// test themselves (a cleanup, a goroutine other than the test's, a retry
// that returns an error): it calls cond every interval until cond reports
// true or timeout has passed, at least once, and reports whether it did.
func Poll(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}

// RunsPATH is pathEnv without the entries a run under a uid of its own
// cannot reach (a pyenv under /root, mode 0700): the PATH of the workers
// tests run as root. A worker fails a run whose python3 is on such an
// entry rather than pick another one (issue 27), as it should for a user;
// the tests mean the python every user can run.
func RunsPATH(pathEnv string) string {
	var keep []string
	for _, d := range filepath.SplitList(pathEnv) {
		if d != "" && filepath.IsAbs(d) && othersReach(d) {
			keep = append(keep, d)
		}
	}
	return strings.Join(keep, string(os.PathListSeparator))
}

// othersReach: every directory from / to dir is searchable by others.
func othersReach(dir string) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == "/" {
			return true
		}
	}
}
