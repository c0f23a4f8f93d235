package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/pywheel"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/worker/isolation"
)

// finishedAll waits for the TaskFinished of every id, acking each.
func finishedAll(t *testing.T, mc *masterConn, d time.Duration, ids ...string) map[string]*pb.TaskFinished {
	t.Helper()
	got := map[string]*pb.TaskFinished{}
	for len(got) < len(ids) {
		m := mc.expect(t, d, fmt.Sprintf("TaskFinished of %v", ids), func(m proto.Message) bool {
			f, ok := m.(*pb.TaskFinished)
			return ok && got[f.GetTaskId()] == nil
		}).(*pb.TaskFinished)
		got[m.GetTaskId()] = m
		mc.send(&pb.TaskFinishedAck{TaskId: m.GetTaskId(), Attempt: m.GetAttempt()})
	}
	return got
}

// probe imports the wheel's package and tries to write into its venv.
const probe = `import os, sys, rlsched_envtest
print("value=" + rlsched_envtest.VALUE)
print("venv=" + os.environ["VIRTUAL_ENV"])
print("exe=" + sys.executable)
try:
    open(os.path.join(os.environ["VIRTUAL_ENV"], "planted"), "w")
    print("writable=yes")
except PermissionError:
    print("writable=no")
`

// TestPythonEnv_Requirements (issue 27): runs naming a requirements file
// get a venv built from it offline with the worker's pip settings, once
// for two runs that want it at once, with its output in their logs; a
// later run gets it from the cache; the runs cannot write into it; a
// build that fails fails the run with pip's last lines and reason
// env_build; a venv given by path is checked.
func TestPythonEnv_Requirements(t *testing.T) {
	pywheel.NeedVenv(t)
	wheels := testutil.ReachableTempDir(t)
	pywheel.Write(t, wheels, "from-the-wheel")
	// The worker's pip settings; the runs' own PIP_* never reach a build.
	t.Setenv("PIP_FIND_LINKS", wheels)
	t.Setenv("PIP_NO_INDEX", "1")
	code := testutil.ReachableTempDir(t)
	if err := os.WriteFile(filepath.Join(code, "requirements.txt"), []byte("rlsched-envtest==1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(code, "broken.txt"), []byte("rlsched-envtest-missing==9.9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := newFakeMaster(t, testToken)
	cfg := isoWorker(t, m, isolation.UIDRange{First: 62080, Last: 62085}, nil)
	mc := m.next(t)
	exec := func(id string, e *pb.ExecuteTask) {
		e.TaskId, e.Attempt, e.User, e.Workdir = id, 1, "alice", code
		e.Argv = []string{"python", "-c", probe}
		e.Env = map[string]string{"PIP_INDEX_URL": "http://run-env.invalid/simple"}
		mc.send(e)
	}
	exec("env-a", &pb.ExecuteTask{PythonRequirements: "requirements.txt"})
	exec("env-b", &pb.ExecuteTask{PythonRequirements: "requirements.txt"})
	fins := finishedAll(t, mc, 3*time.Minute, "env-a", "env-b")
	waited := 0
	var venv string
	for _, id := range []string{"env-a", "env-b"} {
		out := m.log(id, 1)
		if fins[id].GetExitCode() != 0 || !strings.Contains(out, "value=from-the-wheel\n") {
			t.Fatalf("%s: %v\n%s", id, fins[id], out)
		}
		if !strings.Contains(out, "[env] building python env ") || !strings.Contains(out, "[env] Successfully installed rlsched-envtest-1.0") {
			t.Errorf("%s: the build's output is not in the run's log:\n%s", id, out)
		}
		if strings.Contains(out, "another run is building it; waiting") {
			waited++
		}
		env := envMap(out)
		if !strings.HasPrefix(env["venv"], filepath.Join(cfg.DataDir, "envs")+"/") || env["exe"] != env["venv"]+"/bin/python" {
			t.Errorf("%s: venv %q, python %q", id, env["venv"], env["exe"])
		}
		if env["writable"] != "no" {
			t.Errorf("%s: the run could write into its venv:\n%s", id, out)
		}
		venv = env["venv"]
	}
	if waited != 1 {
		t.Errorf("%d of the two runs waited for the other's build, want 1", waited)
	}
	if ents, _ := filepath.Glob(filepath.Join(cfg.DataDir, "envs", "*", envReady)); len(ents) != 1 {
		t.Errorf("envs built: %v, want one", ents)
	}

	// From the cache: no build, and within the second.
	begin := time.Now()
	exec("env-c", &pb.ExecuteTask{PythonRequirements: "requirements.txt"})
	fin := finishedAll(t, mc, time.Minute, "env-c")["env-c"]
	out := m.log("env-c", 1)
	if fin.GetExitCode() != 0 || !strings.Contains(out, "value=from-the-wheel") || strings.Contains(out, "$ ") ||
		!strings.Contains(out, "is built already") {
		t.Fatalf("cached env: %v\n%s", fin, out)
	}
	t.Logf("a run with a warm env: %v from ExecuteTask to its end", time.Since(begin))

	// An existing venv by path: the one just built will do.
	exec("venv-ok", &pb.ExecuteTask{PythonVenv: venv})
	exec("venv-missing", &pb.ExecuteTask{PythonVenv: "/nonexistent/env"})
	exec("env-broken", &pb.ExecuteTask{PythonRequirements: "broken.txt"})
	exec("env-nofile", &pb.ExecuteTask{PythonRequirements: "exp/none.txt"})
	fins = finishedAll(t, mc, 3*time.Minute, "venv-ok", "venv-missing", "env-broken", "env-nofile")
	if f := fins["env-nofile"]; f.GetOutcome() != pb.Outcome_OUTCOME_START_FAILED ||
		!strings.Contains(f.GetError(), "python.requirements exp/none.txt: ") || !strings.Contains(f.GetError(), "no such file") {
		t.Errorf("missing requirements file: %v", f)
	}
	if f := fins["venv-ok"]; f.GetExitCode() != 0 || !strings.Contains(m.log("venv-ok", 1), "venv="+venv+"\n") {
		t.Errorf("venv by path: %v\n%s", f, m.log("venv-ok", 1))
	}
	if f := fins["venv-missing"]; f.GetOutcome() != pb.Outcome_OUTCOME_START_FAILED ||
		!strings.Contains(f.GetError(), "python.venv /nonexistent/env has no bin/python") {
		t.Errorf("missing venv: %v", f)
	}
	f, out := fins["env-broken"], m.log("env-broken", 1)
	if f.GetOutcome() != pb.Outcome_OUTCOME_START_FAILED || f.GetReason() != ReasonEnvBuild ||
		!strings.Contains(f.GetError(), "cannot build the run's python env from broken.txt: pip install failed") ||
		!strings.Contains(f.GetError(), "rlsched-envtest-missing") {
		t.Errorf("broken requirements: %v", f)
	}
	if !strings.Contains(out, "[env] ERROR") || !strings.Contains(out, "[rlsched] cannot start the run: cannot build") {
		t.Errorf("broken requirements, the run's log:\n%s", out)
	}
	if ents, _ := filepath.Glob(filepath.Join(cfg.DataDir, "envs", "*", envReady)); len(ents) != 1 {
		t.Errorf("after a failed build: %v, want the one good env", ents)
	}
}

// TestPythonEnv_Evict: past ENV_CACHE_MB the least recently used envs go,
// never one a run holds (in any process: a lock file).
func TestPythonEnv_Evict(t *testing.T) {
	e, err := newEnvs(t.TempDir(), 2, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, key := range []string{"old-held", "old", "mid", "new"} {
		dir := filepath.Join(e.dir, key)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		marker := filepath.Join(dir, envReady)
		if err := os.WriteFile(marker, []byte(fmt.Sprint(1<<20)), 0o644); err != nil {
			t.Fatal(err)
		}
		at := now.Add(time.Duration(i-10) * time.Minute)
		if err := os.Chtimes(marker, at, at); err != nil {
			t.Fatal(err)
		}
	}
	// Held as a run holds it, through a file of its own.
	held, err := os.OpenFile(filepath.Join(e.dir, "old-held.use"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	e.evict("new")
	for key, want := range map[string]bool{"old-held": true, "old": false, "mid": false, "new": true} {
		if _, err := os.Stat(filepath.Join(e.dir, key)); (err == nil) != want {
			t.Errorf("%s kept %v, want %v", key, err == nil, want)
		}
	}
}
