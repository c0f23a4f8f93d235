package worker

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/codec/pb"
)

// The lines a missing module ends a Python traceback with, and lines that
// only look like them.
func TestMissingModule(t *testing.T) {
	for _, c := range []struct{ line, mod, kind string }{
		{"ModuleNotFoundError: No module named 'gym'", "gym", "ModuleNotFoundError"},
		{"ModuleNotFoundError: No module named 'torch.distributed.elastic'\r", "torch.distributed.elastic", "ModuleNotFoundError"},
		{"ModuleNotFoundError: No module named 'a.b'; 'a' is not a package", "a.b", "ModuleNotFoundError"},
		{"ImportError: No module named gym.envs", "gym.envs", "ImportError"},
		{"ImportError: No module named 'numpy'", "numpy", "ImportError"},
		{"ModuleNotFoundError: No module named 'ev\x1b[2Jil\x00'", "ev[2Jil", "ModuleNotFoundError"},
		{"ModuleNotFoundError: No module named '" + strings.Repeat("x", 300) + "'", strings.Repeat("x", moduleNameBytes) + "…", "ModuleNotFoundError"},
		// junk
		{"", "", ""},
		{"Traceback (most recent call last):", "", ""},
		{"ModuleNotFoundError: No module named 'unclosed", "", ""},
		{"ModuleNotFoundError: No module named ''", "", ""},
		{"ImportError: cannot import name 'x' from 'y'", "", ""},
		{"print: ModuleNotFoundError: No module named 'gym'", "", ""},
		{"ModuleNotFoundError: No module named \x07\x1b", "", ""},
	} {
		mod, kind, ok := missingModule(c.line)
		if mod != c.mod || kind != c.kind || ok != (c.mod != "") {
			t.Errorf("missingModule(%q) = %q, %q, %v; want %q, %q", c.line, mod, kind, ok, c.mod, c.kind)
		}
	}
	want := `the run's Python cannot import gym (ModuleNotFoundError); add it to the run's requirements ("python": {"requirements": "requirements.txt"}, or --requirements) or run it in a venv that has it (--venv)`
	if got := missingModuleHint("ModuleNotFoundError: No module named 'gym'\n"); got != want {
		t.Errorf("hint %q, want %q", got, want)
	}
	if got := missingModuleHint("KeyError: 'x'"); got != "" {
		t.Errorf("hint of another error: %q", got)
	}
}

// lastOutput keeps the last non-blank line whatever the writes' bounds,
// its first lastLineBytes only.
func TestLastOutput(t *testing.T) {
	var l lastOutput
	for _, w := range []string{"Trace", "back\nModuleNotFo", "undError: No module named 'gym'\r\n", "\n  \n"} {
		l.Write([]byte(w))
	}
	if got := l.String(); got != "ModuleNotFoundError: No module named 'gym'" {
		t.Fatalf("last line %q", got)
	}
	l.Write([]byte("unended"))
	if got := l.String(); got != "unended" {
		t.Fatalf("an unended last line: %q", got)
	}
	l.Write([]byte("\n" + strings.Repeat("y", 3*lastLineBytes) + "\n"))
	if got := l.String(); got != strings.Repeat("y", lastLineBytes) {
		t.Fatalf("a long line: %d bytes kept", len(got))
	}
}

// A real run that imports a module its Python lacks fails with the
// sentence that says which and how to add it, as its error and as the last
// line of its own log.
func TestMissingModuleSaidInLogAndError(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	fin, out := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-nomod", Attempt: 1,
		Argv: []string{"python3", "-c", "import nosuchmodule_rlsched"}})
	hint := missingModuleHint("ModuleNotFoundError: No module named 'nosuchmodule_rlsched'")
	if fin.GetExitCode() != 1 || fin.GetError() != "exit code 1: "+hint {
		t.Fatalf("report %v, want exit code 1 and the error %q\n%s", fin, "exit code 1: "+hint, out)
	}
	if !strings.HasSuffix(out, "ModuleNotFoundError: No module named 'nosuchmodule_rlsched'\n[rlsched] "+hint+"\n") {
		t.Fatalf("the run's log does not end with the hint:\n%s", out)
	}
	// Another failure gets no sentence.
	fin, out = runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-keyerr", Attempt: 1,
		Argv: []string{"python3", "-c", "{}['x']"}})
	if fin.GetExitCode() != 1 || fin.GetError() != "" || strings.Contains(out, "[rlsched]") {
		t.Fatalf("a KeyError: %v\n%s", fin, out)
	}
}
