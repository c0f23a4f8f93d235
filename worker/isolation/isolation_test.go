package isolation

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/testutil"

	"github.com/rs/zerolog"
)

func TestParseUIDRange(t *testing.T) {
	if r, err := ParseUIDRange(" 61000-61999 "); err != nil || r != DefaultUIDRange {
		t.Fatalf("default range: %v %v", r, err)
	}
	for _, s := range []string{"", "61000", "0-10", "10-9", "a-b", "1-2147483648", "-5"} {
		if r, err := ParseUIDRange(s); err == nil {
			t.Errorf("ParseUIDRange(%q) = %v, want an error", s, r)
		}
	}
}

// TestUIDPool_NeverShared: two pools on one lock dir (two workers of one
// machine) hand out every uid of a range once, and a released uid again.
func TestUIDPool_NeverShared(t *testing.T) {
	r := UIDRange{First: 62010, Last: 62017}
	dir := t.TempDir()
	var pools []*uidPool
	for range 2 {
		p, err := newUIDPool(r, filepath.Join(dir, "uids"), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		pools = append(pools, p)
	}
	var mu sync.Mutex
	held := map[uint32]*UIDLease{}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			l, err := pools[i%2].acquire()
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if held[l.uid] != nil {
				t.Errorf("uid %d handed out twice", l.uid)
			}
			held[l.uid] = l
		})
	}
	wg.Wait()
	if len(held) != r.size() {
		t.Fatalf("%d uids handed out of %d", len(held), r.size())
	}
	for _, p := range pools {
		if _, err := p.acquire(); err == nil || !strings.Contains(err.Error(), "no free uid in RUN_UID_RANGE 62010-62017") {
			t.Fatalf("acquire from a full range: %v", err)
		}
	}
	held[62013].Release()
	l, err := pools[1].acquire()
	if err != nil || l.uid != 62013 {
		t.Fatalf("after release: %v %v, want uid 62013", l, err)
	}
	for _, l := range held {
		l.Release()
	}
	l.Release()
}

// TestUIDPool_SkipsAccountsAndLiveProcesses: a uid an account or group has
// is never handed out, nor one under which a process still runs.
func TestUIDPool_SkipsAccountsAndLiveProcesses(t *testing.T) {
	p, err := newUIDPool(UIDRange{First: 65534, Last: 65534}, t.TempDir(), zerolog.Nop()) // nobody
	if err != nil {
		t.Fatal(err)
	}
	if l, err := p.acquire(); err == nil {
		t.Fatalf("acquired uid %d, which is the account nobody's", l.uid)
	}
	testutil.NeedRoot(t)
	const uid = 62020
	sleeper := exec.Command("sleep", "600")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	p, err = newUIDPool(UIDRange{First: uid, Last: uid + 1}, t.TempDir(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	l1, err := p.acquire()
	if err != nil || l1.uid != uid+1 {
		t.Fatalf("acquire: %v %v; want uid %d (%d has a live process)", l1, err, uid+1, uid)
	}
	if l, err := p.acquire(); err == nil {
		t.Fatalf("acquired uid %d while a process runs under it", l.uid)
	}
	// What such a process wrote after its run's release is removed when
	// the uid is handed out again (issue 25).
	late := fmt.Sprintf("/tmp/rlsched-late-%d", os.Getpid())
	if err := os.WriteFile(late, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(late)
	if err := os.Chown(late, uid, uid); err != nil {
		t.Fatal(err)
	}
	// KillUID is how the end of a run clears its uid.
	if killed, left, err := KillUID(uid, 10*time.Second); err != nil || killed != 1 || left != 0 {
		t.Fatalf("KillUID: killed %d, left %d, %v", killed, left, err)
	}
	l2, err := p.acquire()
	if err != nil || l2.uid != uid {
		t.Fatalf("acquire after KillUID: %v %v; want uid %d", l2, err, uid)
	}
	if _, err := os.Lstat(late); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("what the uid's last process left outlived it: %v", err)
	}
	l1.Release()
	l2.Release()
}

// TestLookPath: a run under its own uid gets the first program on its PATH
// if it can execute it, and otherwise an error that names what it cannot
// reach, why, and the fix: never a program of that name further on.
func TestLookPath(t *testing.T) {
	base := testutil.ReachableTempDir(t)
	mk := func(rel string, perm os.FileMode, body string) string {
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, perm); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mk("home/bin/tool", 0o755, "\x7fELF")
	mk("open/bin/tool", 0o755, "\x7fELF")
	mk("home/bin/python3", 0o755, "\x7fELF")
	mk("open/bin/python3", 0o755, "\x7fELF")
	mk("open/bin/noread", 0o711, "#!/bin/sh\necho hi\n")
	mk("open/bin/badinterp", 0o755, "#!"+filepath.Join(base, "home/bin/tool")+"\n")
	if err := os.Chmod(filepath.Join(base, "home"), 0o700); err != nil {
		t.Fatal(err)
	}
	id := &Identity{uid: 62030, gid: 62030}
	home, open := filepath.Join(base, "home/bin"), filepath.Join(base, "open/bin")

	if p, err := LookPath("tool", open+":"+home, "/", id); err != nil || p != filepath.Join(open, "tool") {
		t.Fatalf("tool: %q, %v", p, err)
	}
	_, err := LookPath("tool", home+":"+open, "/", id)
	want := fmt.Sprintf("tool resolves to %s, which uid 62030 cannot execute: %s is mode 0700; make it reachable by that uid (install tool where every user can run it, e.g. /usr/bin/tool)",
		filepath.Join(home, "tool"), filepath.Join(base, "home"))
	if u := (*Unreachable)(nil); err == nil || err.Error() != want || !errors.As(err, &u) || u.Path != filepath.Join(home, "tool") {
		t.Fatalf("unreachable tool (another one further on PATH):\n got %v\nwant %s", err, want)
	}
	_, err = LookPath("python3", home+":"+open, "/", id)
	if err == nil || !strings.Contains(err.Error(), "python3 resolves to "+filepath.Join(home, "python3")) ||
		!strings.Contains(err.Error(), "set RUN_PYTHON on the worker") || !strings.Contains(err.Error(), "--venv DIR") {
		t.Fatalf("unreachable python3: %v", err)
	}
	for name, want := range map[string]bool{"python": true, "python3": true, "python3.11": true, "python2": false, "python3.": false, "pythonx": false, "ipython": false} {
		if IsPythonName(name) != want {
			t.Errorf("IsPythonName(%q) = %v", name, !want)
		}
	}
	f := func(name, dir, wantErr string) {
		t.Helper()
		if _, err := LookPath(name, open, dir, id); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("LookPath(%q) = %v, want an error with %q", name, err, wantErr)
		}
	}
	f("noread", "/", "it cannot read it")
	f("badinterp", "/", "its interpreter "+filepath.Join(home, "tool"))
	f(filepath.Join(home, "tool"), "/", "home is mode 0700")
	f("./tool", home, "home is mode 0700")
	f("missing-program", "/", `"missing-program": executable file not found in $PATH`)
	// The worker's own uid: PATH order as given, nothing checked.
	if p, err := LookPath("tool", home+":"+open, "/", nil); err != nil || p != filepath.Join(home, "tool") {
		t.Fatalf("RUN_AS=none: %q %v", p, err)
	}
}

// TestLookupRunUser: RUN_AS=user runs as the account named like the
// run's owner, and refuses owners without one, or with root's or a system
// account's uid.
func TestLookupRunUser(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"", "named no owner"},
		{"no-such-account-x", "has no account \"no-such-account-x\": create it (useradd no-such-account-x)"},
		{"root", "uid 0: RUN_AS=user runs only as regular accounts"},
		{"nobody", "uid 65534"},
	} {
		if _, err := lookupRunUser(c.name); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("lookupRunUser(%q) = %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// TestRelease_TakesRunDirsBack (issue 25): after a dynamic run, its output
// and input dirs are the worker's again (a later run of the same uid must
// not enter them by their known paths), before the uid is free.
func TestRelease_TakesRunDirsBack(t *testing.T) {
	testutil.NeedRoot(t)
	dir := testutil.ReachableTempDir(t)
	iso, err := New(Options{RunAs: RunAsDynamic, RunUIDs: UIDRange{First: 62100, Last: 62100},
		UIDLockDir: filepath.Join(dir, "uids"), DataDir: filepath.Join(dir, "data"), Runs: 1}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	m := &pb.ExecuteTask{TaskId: "t-in", Attempt: 1, Parents: []string{"p-1"}}
	id, err := iso.Acquire(m)
	if err != nil {
		t.Fatal(err)
	}
	d, err := iso.MakeRunDirs(m, id)
	if err != nil {
		t.Fatal(err)
	}
	if d.In == "" {
		t.Fatal("a run with parents got no input dir")
	}
	iso.Release(id, d, zerolog.Nop())
	for _, p := range []string{d.Out, d.In} {
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if uid := st.Sys().(*syscall.Stat_t).Uid; uid != uint32(os.Geteuid()) || st.Mode().Perm() != 0o700 {
			t.Errorf("%s after the release: uid %d mode %o, want the worker's, 0700", p, uid, st.Mode().Perm())
		}
	}
}
