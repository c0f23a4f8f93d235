package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/worker/isolation"
)

// unreachablePython makes a python3 in a 0700 directory (pyenv's under
// /root, as a run's uid sees it) and returns that directory's bin.
func unreachablePython(t *testing.T) string {
	t.Helper()
	home := filepath.Join(testutil.ReachableTempDir(t), "home")
	bin := filepath.Join(home, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "python3"), []byte("#!/bin/sh\necho the-pyenv-python\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestInterpreter_NeverSwappedSilently (issue 27): a run whose python3 is
// one its uid cannot execute fails to start, with the sentence that says
// which, for whom, and the fix in its own log and its error; it is not run
// with the system's python3, which comes later on its PATH.
func TestInterpreter_NeverSwappedSilently(t *testing.T) {
	m := newFakeMaster(t, testToken)
	isoWorker(t, m, isolation.UIDRange{First: 62070, Last: 62071}, nil)
	mc := m.next(t)
	bin := unreachablePython(t)
	fin, out := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-py", Attempt: 1,
		Env: map[string]string{"PATH": bin + ":/usr/bin:/bin"}, Argv: []string{"python3", "-c", "print('ran')"}})
	want := "python3 resolves to " + filepath.Join(bin, "python3") + ", which uid 6207"
	if fin.GetOutcome() != pb.Outcome_OUTCOME_START_FAILED || !strings.Contains(fin.GetError(), want) ||
		!strings.Contains(fin.GetError(), "set RUN_PYTHON on the worker") {
		t.Fatalf("want START_FAILED with %q and the fix, got %v\n%s", want, fin, out)
	}
	if !strings.Contains(out, "[rlsched] cannot start the run: "+want) || strings.Contains(out, "ran") {
		t.Fatalf("the run's log does not say why it did not start:\n%s", out)
	}
}

// TestInterpreter_RunPython (issue 27): with RUN_PYTHON set, such a run
// runs that interpreter, and its own log says so.
func TestInterpreter_RunPython(t *testing.T) {
	sys := "/usr/bin/python3"
	if _, err := os.Stat(sys); err != nil {
		t.Skipf("no %s: %v", sys, err)
	}
	m := newFakeMaster(t, testToken)
	isoWorker(t, m, isolation.UIDRange{First: 62072, Last: 62073}, func(c *Config) { c.RunPython = sys })
	mc := m.next(t)
	bin := unreachablePython(t)
	fin, out := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-runpy", Attempt: 1,
		Env: map[string]string{"PATH": bin + ":/usr/bin:/bin"}, Argv: []string{"python3", "-c", "import sys; print('exe=' + sys.executable)"}})
	if fin.GetExitCode() != 0 || !strings.Contains(out, "exe="+sys) {
		t.Fatalf("run: %v\n%s", fin, out)
	}
	note := "[rlsched] python3 resolves to " + filepath.Join(bin, "python3")
	if !strings.Contains(out, note) || !strings.Contains(out, "running RUN_PYTHON "+sys+" instead") {
		t.Fatalf("the run's log does not say which python it got:\n%s", out)
	}
}

// TestInterpreter_RunPythonMustBeAbsolute: a relative RUN_PYTHON would
// depend on each run's PATH; the worker refuses to start with it.
func TestInterpreter_RunPythonMustBeAbsolute(t *testing.T) {
	c := Config{ID: "w1", Masters: []string{"127.0.0.1:1"}, DataDir: t.TempDir(), JoinToken: testToken, RunPython: "python3"}
	if _, err := c.withDefaults(); err == nil || !strings.Contains(err.Error(), `RUN_PYTHON="python3": want an absolute path`) {
		t.Fatalf("relative RUN_PYTHON: %v", err)
	}
}
