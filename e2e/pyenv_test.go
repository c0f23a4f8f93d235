package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/pywheel"
	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestPythonEnv (issue 27): a run submitted over REST with
// python.requirements runs in a venv its worker built offline with the
// worker's pip settings; its rerun keeps the env and gets it from the
// worker's cache.
func TestPythonEnv(t *testing.T) {
	pywheel.NeedVenv(t)
	b := newBed(t)
	wheels := testutil.ReachableTempDir(t)
	pywheel.Write(t, wheels, "over-rest")
	code := testutil.ReachableTempDir(t)
	if err := os.WriteFile(filepath.Join(code, "requirements.txt"), []byte(pywheel.Package+"==1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data")})
	b.StartWorker("w1", m.RPC, rig.WorkerOpts{GPUs: 0, Env: []string{"PIP_FIND_LINKS=" + wheels, "PIP_NO_INDEX=1"}})
	m.WaitJoined(t, "w1")
	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	id, _ := b.submit(alice, map[string]any{"name": "env", "workdir": code,
		"command": []string{"python", "-c", "import " + pywheel.Module + " as m; print('value=' + m.VALUE)"},
		"python":  map[string]string{"requirements": "requirements.txt"}})
	alice.waitStatus(id, "SUCCEEDED", 3*time.Minute)
	out, err := alice.logText(id)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "value=over-rest\n") || !strings.Contains(out, "[env] Successfully installed "+pywheel.Package+"-1.0") {
		t.Fatalf("the run's log:\n%s", out)
	}
	var re struct {
		ID string `json:"id"`
	}
	alice.Must("POST", "/api/tasks/"+id+"/rerun", map[string]any{}, 202, &re)
	b.track(re.ID)
	alice.waitStatus(re.ID, "SUCCEEDED", time.Minute)
	if out, _ := alice.logText(re.ID); !strings.Contains(out, "value=over-rest\n") || !strings.Contains(out, "is built already") || strings.Contains(out, "Successfully installed") {
		t.Fatalf("the rerun's log:\n%s", out)
	}
}

// TestMissingModuleSaysHow (issue 32): a run whose Python lacks a module
// fails with an error that names it and says how to add it, and its log
// ends with the same sentence.
func TestMissingModuleSaysHow(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{})
	b.StartWorker("w1", m.RPC, rig.WorkerOpts{GPUs: 0})
	m.WaitJoined(t, "w1")
	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	id, _ := b.submit(alice, map[string]any{"name": "nomod", "command": []string{"python3", "-c", "import nosuchmodule_rlsched"}})
	tk := alice.waitStatus(id, "FAILED", time.Minute)
	hint := "the run's Python cannot import nosuchmodule_rlsched (ModuleNotFoundError); add it to the run's requirements " +
		`("python": {"requirements": "requirements.txt"}, or --requirements) or run it in a venv that has it (--venv)`
	if tk.Error != "exit code 1: "+hint {
		t.Fatalf("the run's error is %q, want %q", tk.Error, "exit code 1: "+hint)
	}
	if out, _ := alice.logText(id); !strings.HasSuffix(out, "No module named 'nosuchmodule_rlsched'\n[rlsched] "+hint+"\n") {
		t.Fatalf("the run's log does not end with the sentence:\n%s", out)
	}
}
