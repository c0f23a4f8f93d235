package leaseguard

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/worker/isolation"
	"github.com/rs/zerolog"
)

func TestGuardTable_Success(t *testing.T) {
	f := func(lines []string, now time.Duration, wantExpired []int, wantLeft []int, wantWait time.Duration) {
		t.Helper()
		tab := guardTable{}
		for _, l := range lines {
			if err := tab.apply(l); err != nil {
				t.Fatalf("apply(%q): %v", l, err)
			}
		}
		var got []int
		for _, e := range tab.expire(now) {
			got = append(got, e.pgid)
		}
		slices.Sort(got)
		if !slices.Equal(got, wantExpired) {
			t.Errorf("%q at %v: expired %v, want %v", lines, now, got, wantExpired)
		}
		if left := tab.all(); !slices.Equal(left, wantLeft) {
			t.Errorf("%q at %v: left %v, want %v", lines, now, left, wantLeft)
		}
		if w := tab.wait(now); w != wantWait {
			t.Errorf("%q at %v: wait %v, want %v", lines, now, w, wantWait)
		}
	}
	s, ms := time.Second, time.Millisecond
	f([]string{"+10 5000000000"}, 4*s, nil, []int{10}, guardPoll)                   // a second left: sleep the poll bound
	f([]string{"+10 5000000000"}, 4900*ms, nil, []int{10}, 101*ms)                  // woken just before the deadline
	f([]string{"+10 5000000000"}, 5*s, nil, []int{10}, ms)                          // at the deadline: not yet
	f([]string{"+10 5000000000"}, 6*s, []int{10}, nil, guardIdle)                   // nothing left to watch
	f([]string{"+10 5000000000", "+10 9000000000"}, 6*s, nil, []int{10}, guardPoll) // renewed
	f([]string{"+10 5000000000", "-10"}, 6*s, nil, nil, guardIdle)                  // gone before its deadline
	f([]string{"+10 0"}, 1000*s, nil, []int{10}, guardIdle)                         // no deadline
	f([]string{"+10 5000000000", "+11 7000000000", " +12 1000000000 "}, 6*s, []int{10, 12}, []int{11}, guardPoll)
	f([]string{"+11 6100000000"}, 6*s, nil, []int{11}, 101*ms)
	f([]string{"+10 5000000000 61000", "+11 0 61001"}, 6*s, []int{10}, []int{11}, guardIdle) // with dynamic uids
}

func TestGuardTable_UIDs(t *testing.T) {
	tab := guardTable{}
	for _, l := range []string{"+10 5 61000", "+11 5", "+12 5 61002", "+12 9 61002"} {
		if err := tab.apply(l); err != nil {
			t.Fatal(err)
		}
	}
	want := guardTable{10: {5, 61000}, 11: {5, 0}, 12: {9, 61002}}
	if len(tab) != len(want) {
		t.Fatalf("table %v, want %v", tab, want)
	}
	for k, e := range want {
		if tab[k] != e {
			t.Fatalf("table %v, want %v", tab, want)
		}
	}
}

func TestGuardTable_Failure(t *testing.T) {
	f := func(line string) {
		t.Helper()
		tab := guardTable{7: {deadline: 42, uid: 61000}}
		if err := tab.apply(line); err == nil {
			t.Errorf("apply(%q) succeeded", line)
		}
		if len(tab) != 1 || tab[7] != (guardEntry{42, 61000}) {
			t.Errorf("apply(%q) changed the table: %v", line, tab)
		}
	}
	f("")
	f("+")
	f("+1 5")  // group 1 would be init's
	f("+0 5")  // kill(-0) is the guard's own group
	f("+-5 5") // negative
	f("+x 5")
	f("+7")     // no deadline
	f("+7 -1")  // negative deadline
	f("+7 1.5") // not nanoseconds
	f("*7 5")
	f("+7 5 0") // uid 0 is root's: never a run's
	f("+7 5 x")
	f("+7 5 -1")
	f("+7 5 4294967296")
}

// TestGuard_KillsAtLeaseDeadline runs the real guard process: a group whose
// lease is renewed lives, a group whose deadline passes is SIGKILLed soon
// after it, not before.
func TestGuard_KillsAtLeaseDeadline(t *testing.T) {
	g, err := Start(zerolog.Nop(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	start := func() int {
		cmd := exec.Command("sleep", "600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go cmd.Wait()
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		return cmd.Process.Pid
	}
	const ttl = 2 * time.Second // the renewing loop below may stall that long on a loaded machine
	g.Renew(Now()+ttl, nil)
	lapsing, renewed := start(), start()
	for _, p := range []int{lapsing, renewed} {
		if err := g.Add(p, 0); err != nil {
			t.Fatal(err)
		}
	}
	deadline, _ := g.Deadline(lapsing)
	// Renew one group until the other is gone, at most 5 s past its deadline.
	testutil.WaitFor(t, deadline+5*time.Second-Now(), "the lapsing group killed by the guard", func() bool {
		g.Renew(Now()+ttl, []int{renewed})
		return testutil.GroupGone(lapsing)
	})
	if now := Now(); now < deadline {
		t.Fatalf("group killed %v before its lease deadline", deadline-now)
	}
	if testutil.GroupGone(renewed) {
		t.Fatal("the renewed group was killed too")
	}
	// Once the worker is gone (the pipe closes), the guard kills the rest.
	g.Close()
	testutil.WaitGroupGone(t, renewed, 5*time.Second)
}

// TestGuard_EnvironmentHasNoSecrets: the guard process does not inherit the
// join token or any other variable of the worker but the Go runtime's.
func TestGuard_EnvironmentHasNoSecrets(t *testing.T) {
	t.Setenv("WORKER_JOIN_TOKEN", "join-secret-123")
	t.Setenv("JWT_SECRET", "jwt-secret-456")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-789")
	t.Setenv("GOTRACEBACK", "all")
	g, err := Start(zerolog.Nop(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	path := fmt.Sprintf("/proc/%d/environ", g.cmd.Process.Pid)
	var env []string
	testutil.WaitFor(t, 10*time.Second, "the guard to exec", func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		env = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		return slices.Contains(env, "RLSCHED_GUARD=1") // before exec it shows ours
	})
	for _, kv := range env {
		if strings.Contains(kv, "secret") {
			t.Errorf("guard environment holds %q", kv)
		}
		k, _, _ := strings.Cut(kv, "=")
		if k != Env && k != guardLocksEnv && !guardKeepEnv[k] {
			t.Errorf("guard environment holds %s, not a Go runtime variable", k)
		}
	}
	if !slices.Contains(env, "GOTRACEBACK=all") {
		t.Errorf("guard environment %q lacks the runtime's GOTRACEBACK", env)
	}
}

// TestGuard_StoppedGuardNeverBlocksTheWorker: with the guard process
// stopped and its pipe full, registering and renewing still return at once,
// and the guard reads the latest record once it runs again.
func TestGuard_StoppedGuardNeverBlocksTheWorker(t *testing.T) {
	g, err := Start(zerolog.Nop(), "")
	if err != nil {
		t.Fatal(err)
	}
	pid := g.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	// Groups above the kernel's pid limit (2^22): no process can have them.
	var pgids []int
	for i := range 2000 {
		pgids = append(pgids, 1<<23+i)
	}
	for _, p := range pgids {
		if err := g.Add(p, 0); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// ~40 KB of lines per round: the 64 KiB pipe is full after two.
		for i := range 200 {
			g.Renew(Now()+time.Hour+time.Duration(i), pgids)
		}
		for _, p := range pgids[:1000] {
			g.Remove(p)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("renewals blocked on a stopped guard")
	}
	if d, ok := g.Deadline(pgids[1999]); !ok || d < Now()+59*time.Minute {
		t.Fatalf("record of group %d: %v, %v; want the last renewal's deadline", pgids[1999], d, ok)
	}
	if _, ok := g.Deadline(pgids[0]); ok {
		t.Fatal("a removed group is still in the record")
	}
	syscall.Kill(pid, syscall.SIGCONT)
	closed := make(chan struct{})
	go func() { g.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("close did not return once the guard ran again")
	}
}

// TestServeGuard_ReadsEverythingBeforeKilling: a renewal that reached the
// pipe together with (or soon after) the deadline it replaces wins: the
// guard reads all it has been sent before it looks at the clock.
func TestServeGuard_ReadsEverythingBeforeKilling(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }()
	pgid := cmd.Process.Pid
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	now := Now()
	fmt.Fprintf(w, "+%d %d\n+%d %d\n-%d\n", pgid, now-time.Second, pgid, now+time.Hour, pgid)
	w.Close()
	var out strings.Builder
	if code := serveGuard(int(r.Fd()), &out, ""); code != 0 {
		t.Fatalf("serveGuard: %d", code)
	}
	if testutil.GroupGone(pgid) {
		t.Fatalf("the guard killed a group whose renewal it had been sent; it said:\n%s", out.String())
	}
}

// escapee starts, under uid, a process group whose member leaves it with
// setsid, and returns the group once both processes run.
func escapee(t *testing.T, uid uint32) int {
	t.Helper()
	cmd := exec.Command("sh", "-c", "setsid sleep 600 & exec sleep 600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); isolation.KillUID(uid, 5*time.Second) })
	testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("two processes of uid %d", uid), func() bool {
		pids, _ := isolation.UIDProcesses(uid)
		return len(pids) == 2
	})
	return cmd.Process.Pid
}

// TestServeGuard_KillsWhatLeftTheGroup: a run under a dynamic uid whose
// process left its group (setsid) is killed whole, at the worker's end and
// at its lease deadline; a run registered without a uid (RUN_AS=user: a
// person's account) is killed by its group alone, and the process that left
// it is not the guard's to kill.
func TestServeGuard_KillsWhatLeftTheGroup(t *testing.T) {
	testutil.NeedRoot(t)
	const dynamic, expiring, account = 62150, 62151, 62152
	pgDynamic, pgExpiring, pgAccount := escapee(t, dynamic), escapee(t, expiring), escapee(t, account)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out testutil.SyncBuffer
	served := make(chan int)
	go func() { served <- serveGuard(int(r.Fd()), &out, "") }()
	fmt.Fprintf(w, "+%d 0 %d\n+%d %d %d\n+%d 0\n", pgDynamic, dynamic, pgExpiring, Now()+100*time.Millisecond, expiring, pgAccount)
	testutil.WaitFor(t, 10*time.Second, "the expired run's uid to be clear", func() bool {
		pids, _ := isolation.UIDProcesses(expiring)
		return len(pids) == 0
	})
	if pids, _ := isolation.UIDProcesses(dynamic); len(pids) != 2 {
		t.Fatalf("uid %d has %v before its run's lease ended or the worker did", dynamic, pids)
	}
	w.Close() // the worker is gone
	select {
	case <-served:
	case <-time.After(20 * time.Second):
		t.Fatal("the guard did not exit after EOF")
	}
	if pids, _ := isolation.UIDProcesses(dynamic); len(pids) != 0 {
		t.Fatalf("processes %v of uid %d outlived the worker; the guard said:\n%s", pids, dynamic, out.String())
	}
	testutil.WaitGroupGone(t, pgAccount, 5*time.Second)
	if pids, _ := isolation.UIDProcesses(account); len(pids) != 1 {
		t.Fatalf("uid %d has %v; want only the process that left the run's group, which is not the guard's", account, pids)
	}
	for _, want := range []string{fmt.Sprintf("under the run's uid %d", expiring), "lease expired",
		fmt.Sprintf("worker gone, killed process group %d", pgDynamic), fmt.Sprintf("under the run's uid %d", dynamic)} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the guard did not say %q:\n%s", want, out.String())
		}
	}
}

// TestServeGuard_LeavesAUidAnotherRunHolds: the guard of a worker that
// died sweeps a run's uid only under the uid's lock; a uid whose lock
// another worker took since (for a new run, once the group was gone) is
// not swept, and its new run lives. A uid nobody holds is swept.
func TestServeGuard_LeavesAUidAnotherRunHolds(t *testing.T) {
	testutil.NeedRoot(t)
	const taken, free = 62153, 62154
	locks := t.TempDir()
	pgOld, pgFree := escapee(t, taken), escapee(t, free)
	l, err := isolation.LockUID(locks, taken) // the other worker's new run holds it
	if err != nil || l == nil {
		t.Fatalf("lock of uid %d: %v, %v", taken, l, err)
	}
	defer l.Release()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// What each left in /tmp: removed for the uid nobody holds (issue 25).
	left := map[uint32]string{}
	for _, uid := range []uint32{taken, free} {
		left[uid] = fmt.Sprintf("/tmp/rlsched-guard-left-%d-%d", os.Getpid(), uid)
		if err := os.WriteFile(left[uid], nil, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(left[uid])
		if err := os.Chown(left[uid], int(uid), int(uid)); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Fprintf(w, "+%d 0 %d\n+%d 0 %d\n", pgOld, taken, pgFree, free)
	w.Close() // the worker is gone
	var out strings.Builder
	if code := serveGuard(int(r.Fd()), &out, locks); code != 0 {
		t.Fatalf("serveGuard: %d", code)
	}
	testutil.WaitGroupGone(t, pgOld, 5*time.Second)
	if pids, _ := isolation.UIDProcesses(taken); len(pids) != 1 {
		t.Fatalf("uid %d has %v; want the process that left the old group, which the uid's new holder now answers for; the guard said:\n%s", taken, pids, out.String())
	}
	if pids, _ := isolation.UIDProcesses(free); len(pids) != 0 {
		t.Fatalf("processes %v of uid %d, which nobody holds, outlived the worker; the guard said:\n%s", pids, free, out.String())
	}
	if want := fmt.Sprintf("uid %d is another run's by now", taken); !strings.Contains(out.String(), want) {
		t.Errorf("the guard did not say %q:\n%s", want, out.String())
	}
	if _, err := os.Lstat(left[free]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("what uid %d left in /tmp outlived the worker: %v; the guard said:\n%s", free, err, out.String())
	}
	if _, err := os.Lstat(left[taken]); err != nil {
		t.Errorf("what uid %d left was removed while another run holds it: %v", taken, err)
	}
}

// TestServeGuard_SweepsWhenTheLockCannotBeOpened: a uid lock directory the
// guard cannot use (no worker can lock through it either) does not spare
// what the dead worker's run left under its uid.
func TestServeGuard_SweepsWhenTheLockCannotBeOpened(t *testing.T) {
	testutil.NeedRoot(t)
	const uid = 62155
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pg := escapee(t, uid)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fmt.Fprintf(w, "+%d 0 %d\n", pg, uid)
	w.Close()
	var out strings.Builder
	if code := serveGuard(int(r.Fd()), &out, notADir); code != 0 {
		t.Fatalf("serveGuard: %d", code)
	}
	if pids, _ := isolation.UIDProcesses(uid); len(pids) != 0 {
		t.Fatalf("processes %v of uid %d outlived the worker; the guard said:\n%s", pids, uid, out.String())
	}
	if !strings.Contains(out.String(), "without its lock") {
		t.Errorf("the guard did not say it swept without the lock:\n%s", out.String())
	}
}

// TestGuardRecordsALateRenewal: a renewal that moves a deadline already
// passed marks the group lapsed (the guard process may have killed it in
// between); one in time does not. No guard process: the record alone.
func TestGuardRecordsALateRenewal(t *testing.T) {
	g := newGuard(zerolog.Nop())
	now := Now()
	g.Renew(now-time.Second, nil) // the last acked renewal's deadline has passed
	if err := g.Add(1001, 0); err != nil {
		t.Fatal(err)
	}
	g.Renew(now+time.Hour, nil)
	if err := g.Add(1002, 0); err != nil {
		t.Fatal(err)
	}
	g.Renew(now+2*time.Hour, []int{1001, 1002})
	if !g.Lapsed(1001) {
		t.Error("a group renewed after its deadline passed is not marked lapsed")
	}
	if g.Lapsed(1002) {
		t.Error("a group renewed in time is marked lapsed")
	}
	if err := g.Remove(1001); err != nil {
		t.Fatal(err)
	}
	if g.Lapsed(1001) {
		t.Error("a removed group is still marked lapsed")
	}
}
