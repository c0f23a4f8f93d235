package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// Short TTLs so that leases expire within seconds (see cmd/rlsched/master.go).
const (
	hbTTLSeconds       = 3 // workers beat every second
	taskTTLSeconds     = 4
	cancelGraceSeconds = 2
)

// bed is one test's cluster and the runs it submitted: what the test
// started is killed when it ends, and so is what is left of its runs.
type bed struct {
	*rig.Cluster

	mu    sync.Mutex
	tasks []string
}

type (
	proc    = rig.Proc
	master  = rig.Master
	logLine = rig.Line
)

// newBed skips under -short, marks the test parallel and prepares its
// cluster, whose servers get short TTLs.
func newBed(t *testing.T) *bed {
	t.Helper()
	b := &bed{Cluster: rig.New(t,
		"WORKER_HB_TTL_SECONDS="+strconv.Itoa(hbTTLSeconds),
		"WORKER_TASK_TTL_SECONDS="+strconv.Itoa(taskTTLSeconds),
		"RLSCHED_CANCEL_GRACE_SECONDS="+strconv.Itoa(cancelGraceSeconds))}
	t.Parallel()
	b.OnStop(b.killRuns)
	return b
}

// track remembers a submitted run so its processes are killed at the end.
func (b *bed) track(taskID string) {
	b.mu.Lock()
	b.tasks = append(b.tasks, taskID)
	b.mu.Unlock()
}

// killRuns kills what is left of the groups of this test's runs, once its
// workers are dead: the worker's guard kills them, given a moment.
func (b *bed) killRuns() {
	b.mu.Lock()
	tasks := append([]string(nil), b.tasks...)
	b.mu.Unlock()
	type left struct {
		task string
		pgid int
	}
	var groups []left
	for _, id := range tasks {
		for _, rp := range runProcs(id) {
			groups = append(groups, left{id, rp.pgid})
		}
	}
	testutil.Poll(5*time.Second, 50*time.Millisecond, func() bool {
		for _, g := range groups {
			if !groupGone(g.pgid) {
				return false
			}
		}
		return true
	})
	for _, g := range groups {
		if !groupGone(g.pgid) && g.pgid > 1 && g.pgid != syscall.Getpgrp() {
			b.T.Logf("killing leftover process group %d of run %s", g.pgid, g.task)
			_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
		}
	}
}

// runProc is a process of a run, found by RLSCHED_TASK_ID in its environment.
type runProc struct {
	pid, pgid int
	state     byte
}

// runProcs lists the live (non-zombie) processes whose environment holds
// RLSCHED_TASK_ID=taskID: the worker gives every run that variable.
func runProcs(taskID string) []runProc {
	want := []byte("RLSCHED_TASK_ID=" + taskID)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []runProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		found := false
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				found = true
				break
			}
		}
		if !found {
			continue
		}
		st, ok := procStat(pid)
		if !ok || st.state == 'Z' {
			continue
		}
		out = append(out, st)
	}
	return out
}

// procStat reads state and process group of pid from /proc/pid/stat.
func procStat(pid int) (runProc, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return runProc{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return runProc{}, false
	}
	f := strings.Fields(string(b[i+1:])) // state ppid pgrp ...
	if len(f) < 3 || len(f[0]) != 1 {
		return runProc{}, false
	}
	pgid, err := strconv.Atoi(f[2])
	if err != nil {
		return runProc{}, false
	}
	return runProc{pid: pid, pgid: pgid, state: f[0][0]}, true
}

// groupGone reports whether process group pgid has no live member:
// kill(-pgid, 0) fails with ESRCH, or only zombies are left (PID 1 of a
// container may never reap orphans).
func groupGone(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(pid); ok && st.pgid == pgid && st.state != 'Z' {
			return false
		}
	}
	return true
}

// waitRunProcs waits until at least n live processes of the run exist and
// returns them; they all must share one process group of their own.
func waitRunProcs(t testing.TB, taskID string, n int, timeout time.Duration) []runProc {
	t.Helper()
	var ps []runProc
	testutil.Eventually(t, timeout, func() (bool, string) {
		ps = runProcs(taskID)
		return len(ps) >= n, fmt.Sprintf("%d process(es) with RLSCHED_TASK_ID=%s, want ≥ %d", len(ps), taskID, n)
	})
	pgid := ps[0].pgid
	for _, p := range ps {
		if p.pgid != pgid {
			t.Fatalf("run %s has processes in groups %d and %d; want one group", taskID, pgid, p.pgid)
		}
	}
	if pgid == syscall.Getpgrp() || pgid <= 1 {
		t.Fatalf("run %s is in process group %d, not a group of its own", taskID, pgid)
	}
	return ps
}

// cli runs a client subcommand of the binary, the way a user would.
func (b *bed) cli(configDir string, args ...string) (string, int) {
	b.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.Bin, args...)
	cmd.Env = b.ServerEnv("RLSCHED_CONFIG_DIR=" + configDir)
	// A directory of its own: submit snapshots the tree it runs in (issue
	// 27), and b.Dir holds the servers' live data.
	cmd.Dir = filepath.Join(b.Dir, "cli-cwd")
	if err := os.MkdirAll(cmd.Dir, 0o755); err != nil {
		b.T.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			b.T.Fatalf("rlsched %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return string(out), code
}

// sharedDir is a directory every run of a test may write, whatever its
// uid (a run's own dirs are its alone): for files the runs leave each other.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rlsched-e2e-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}
