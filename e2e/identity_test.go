package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// Issue 11, bad input: workers that would share an identity. A data dir is
// one worker: a second worker on it exits at once and says why; workers
// started with default flags either work under distinct ids or exit, and no
// run is lost either way.

// gateScript prints "start", waits until the file named by $GATE exists
// (the test creates it), and prints "end".
const gateScript = `echo start; while [ ! -e "$GATE" ]; do sleep 0.05; done; echo end`

// idWorkerJoins returns the ids of the workers m logged as joined, sorted.
func idWorkerJoins(m *master) []string {
	var ids []string
	for _, l := range m.Logs() {
		if l.Msg() == "worker joined" {
			ids = append(ids, l.Str("worker"))
		}
	}
	sort.Strings(ids)
	return ids
}

// idWaitRefused waits until w exits and checks it failed with a message that
// names the data dir in use, its holder's pid and --data-dir.
func idWaitRefused(t *testing.T, w *proc, dir string, holder int) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, func() (bool, string) {
		return w.Exited(), w.Name + " still runs on a data dir in use"
	})
	var ee *exec.ExitError
	if !errors.As(w.Err(), &ee) || ee.ExitCode() != 1 {
		t.Errorf("%s ended with %v; want exit status 1", w.Name, w.Err())
	}
	msg := w.Stderr()
	want := []string{"data dir " + dir + " is in use", "--data-dir"}
	if holder > 0 {
		want = append(want, "pid "+strconv.Itoa(holder))
	}
	for _, s := range want {
		if !strings.Contains(msg, s) {
			t.Errorf("%s's message does not say %q:\n%s", w.Name, s, rig.Tail(msg, 10))
		}
	}
}

// TestIdentityTwoWorkersOneDataDir: a second worker on a data dir in use
// exits at once with a message naming --data-dir and the first worker's pid;
// the first worker and its run go on untouched.
func TestIdentityTwoWorkersOneDataDir(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "master")})
	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	dir := filepath.Join(b.Dir, "worker-dir")
	env := b.ServerEnv("WORKER_JOIN_TOKEN=" + b.JoinToken)
	args := func(id string) []string { return rig.WorkerArgs(m.RPC, id, 2, 0, dir) }
	w1 := b.Start("worker-1", env, args("w1")...)
	m.WaitJoined(t, "w1")
	gate := filepath.Join(b.Dir, "gate")
	id, _ := b.submit(alice, map[string]any{"command": []string{"sh", "-c", gateScript}, "env": map[string]string{"GATE": gate}})
	alice.waitLogContains(id, "start\n", 30*time.Second)

	w2 := b.Start("worker-2", env, args("w2")...)
	idWaitRefused(t, w2, dir, w1.Cmd.Process.Pid)
	if ids := idWorkerJoins(m); len(ids) != 1 || ids[0] != "w1" {
		t.Errorf("workers joined: %v; want only w1", ids)
	}

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tk := alice.waitStatus(id, "SUCCEEDED", 30*time.Second)
	if tk.Attempt != 1 || tk.Worker != "w1" {
		t.Errorf("run: %v; want attempt 1 on w1", tk)
	}
	if text, err := alice.logText(id); err != nil || !strings.HasSuffix(text, "\nstart\nend\n") || strings.Count(text, "start") != 1 {
		t.Errorf("log %q (%v); want start and end, once", text, err)
	}
	if w1.Exited() {
		t.Fatalf("the first worker exited: %v", w1.Err())
	}
}

// idDefaultPrefix is the start of a default worker id on this host.
func idDefaultPrefix(t *testing.T) string {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	h := strings.Trim(regexp.MustCompile(`[^A-Za-z0-9_-]+`).ReplaceAllString(host, "-"), "-")
	if len(h) > 57 {
		h = h[:57]
	}
	return h + "-"
}

// TestIdentityDefaultFlagsOwnDataDirs: three workers started without --id,
// each with its own data dir, join under three distinct ids (the host name
// and a short id kept in the dir) and run at the same time.
func TestIdentityDefaultFlagsOwnDataDirs(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "master")})
	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	env := b.ServerEnv("WORKER_JOIN_TOKEN=" + b.JoinToken)
	for i := range 3 {
		b.Start(fmt.Sprintf("worker-%d", i), env, "worker", "--master", m.RPC, "--slots", "1",
			"--data-dir", filepath.Join(b.Dir, fmt.Sprintf("worker-%d", i)))
	}
	var ids []string
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		ids = idWorkerJoins(m)
		return len(ids) == 3, fmt.Sprintf("workers joined: %v; want 3", ids)
	})
	shape := regexp.MustCompile("^" + regexp.QuoteMeta(idDefaultPrefix(t)) + "[0-9a-f]{6}$")
	for i, id := range ids {
		if !shape.MatchString(id) {
			t.Errorf("default worker id %q; want %s", id, shape)
		}
		if i > 0 && id == ids[i-1] {
			t.Errorf("two workers joined as %s", id)
		}
	}

	// One slot each: three gated runs at once need all three workers.
	gate := filepath.Join(b.Dir, "gate")
	var runs []string
	for range 3 {
		id, _ := b.submit(alice, map[string]any{"command": []string{"sh", "-c", gateScript}, "env": map[string]string{"GATE": gate}})
		runs = append(runs, id)
	}
	on := map[string]string{}
	for _, id := range runs {
		tk := alice.waitStatus(id, "RUNNING", 30*time.Second)
		if prev, dup := on[tk.Worker]; dup {
			t.Fatalf("runs %s and %s both on worker %q with one slot", prev, id, tk.Worker)
		}
		on[tk.Worker] = id
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tk := range alice.waitAllStatus(runs, "SUCCEEDED", 60*time.Second) {
		if tk.Attempt != 1 {
			t.Errorf("run %v: want attempt 1", tk)
		}
	}
}

// TestIdentityDefaultFlagsSharedDataDir: three workers started with default
// flags by one user share the default data dir: one works, the other two
// exit at once with a message naming --data-dir, and every run succeeds.
func TestIdentityDefaultFlagsSharedDataDir(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "master")})
	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	// The default data dir (/var/lib/rlsched-worker as root, else under
	// $HOME) is where three default-flag workers meet; the test points that
	// default at a dir of its own through the flag's environment variable
	// instead of touching the machine's.
	dir := filepath.Join(b.Dir, "home", ".local", "share", "rlsched", "worker")
	env := b.ServerEnv("WORKER_JOIN_TOKEN="+b.JoinToken, "RLSCHED_WORKER_DIR="+dir)
	var ws []*proc
	for i := range 3 {
		ws = append(ws, b.Start(fmt.Sprintf("worker-%d", i), env, "worker", "--master", m.RPC))
	}
	var alive *proc
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		alive = nil
		n := 0
		for _, w := range ws {
			if !w.Exited() {
				alive = w
				n++
			}
		}
		return n == 1, fmt.Sprintf("%d of 3 workers on one data dir still run; want 1", n)
	})
	for _, w := range ws {
		if w != alive {
			idWaitRefused(t, w, dir, alive.Cmd.Process.Pid)
		}
	}
	var ids []string
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		ids = idWorkerJoins(m)
		return len(ids) == 1, fmt.Sprintf("workers joined: %v; want 1", ids)
	})
	if !strings.HasPrefix(ids[0], idDefaultPrefix(t)) {
		t.Errorf("worker joined as %q; want the host's default id", ids[0])
	}

	var runs []string
	for i := range 4 {
		id, _ := b.submit(alice, map[string]any{"command": []string{"sh", "-c", "echo run " + strconv.Itoa(i)}})
		runs = append(runs, id)
	}
	for _, tk := range alice.waitAllStatus(runs, "SUCCEEDED", 60*time.Second) {
		if tk.Attempt != 1 || tk.Worker != ids[0] {
			t.Errorf("run %v: want attempt 1 on %s", tk, ids[0])
		}
	}
	if alive.Exited() {
		t.Fatalf("the worker that holds the data dir exited: %v", alive.Err())
	}
}
