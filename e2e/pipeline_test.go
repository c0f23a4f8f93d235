package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// The scripts of the pipeline: train writes a model; each eval reads it
// from RLSCHED_INPUT_DIR/<train's id>/ (inputsFrom) and names its parent;
// eval2 fails the first time (a flag file outside rlsched says so); the
// report waits for the ten evals and names them in order.
const (
	trainPy = `import os
open(os.path.join(os.environ["RLSCHED_OUTPUT_DIR"], "model.txt"), "w").write("weights-42")
print("trained", flush=True)`
	evalPy = `import os, sys
parent = os.environ["RLSCHED_PARENT_1"]
model = open(os.path.join(os.environ["RLSCHED_INPUT_DIR"], parent, "model.txt")).read()
print("eval of", parent, "model", model, flush=True)
flag = sys.argv[1] if len(sys.argv) > 1 else ""
if flag and not os.path.exists(flag):
    open(flag, "w").write("failed once")
    sys.exit(3)`
	reportPy = `import os
print("report after", ",".join(os.environ["RLSCHED_PARENT_%d" % i] for i in range(1, 11)), flush=True)`
)

// TestPipelineRunAndRetry is issue 29's "Done when" through a real master
// and worker: train → 10 × eval → report runs by itself, each child starting
// within a second of its last parent's end; eval2 fails, so the report is
// CANCELLED (reason dependency); `rlsched pipeline retry` reruns only eval2
// and the report, wired to the kept train and evals, and both succeed.
func TestPipelineRunAndRetry(t *testing.T) {
	const evals = 10 // the train → 10 × eval → report; one slot each, so all start at once
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data")})
	b.StartWorker("worker-w1", m.RPC, rig.WorkerOpts{ID: "w1", Slots: evals})
	m.WaitJoined(t, "w1")
	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	flagDir := sharedDir(t) // runs have uids of their own: the flag lives where any may write
	flag := filepath.Join(flagDir, "eval2-failed-once")
	py := func(src string, args ...string) []string { return append([]string{"python3", "-c", src}, args...) }
	steps := []map[string]any{{"name": "train", "command": py(trainPy)}}
	var evalNames []string
	var reportAfter []map[string]string
	for i := 1; i <= evals; i++ {
		name, cmd := fmt.Sprint("eval", i), py(evalPy)
		if i == 2 {
			cmd = py(evalPy, flag)
		}
		steps = append(steps, map[string]any{"name": name, "command": cmd, "after": []map[string]string{{"step": "train"}}, "inputsFrom": []string{"train"}})
		evalNames = append(evalNames, name)
		reportAfter = append(reportAfter, map[string]string{"step": name})
	}
	steps = append(steps, map[string]any{"name": "report", "command": py(reportPy), "after": reportAfter})
	spec := map[string]any{"name": "exp", "steps": steps}
	file := filepath.Join(b.Dir, "exp.json")
	raw, _ := json.Marshal(spec)
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(b.Dir, "cli-config")
	cli := func(want int, args ...string) string {
		t.Helper()
		out, code := b.cli(cfg, append(args, "--server", m.URL)...)
		if code != want {
			t.Fatalf("rlsched %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
		}
		return out
	}
	cli(0, "login", "-u", "alice", "-p", rig.Password)
	out := cli(0, "pipeline", "run", file)
	pid := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])

	type step struct {
		Name, Run, Status, Reason string
		After                     []string
		Depth                     int
	}
	var p struct{ Steps []step }
	alice.Must("GET", "/api/pipelines/"+pid, nil, 200, &p)
	runs := map[string]string{}
	for _, s := range p.Steps {
		runs[s.Name] = s.Run
		b.track(s.Run)
	}
	alice.waitStatus(runs["eval2"], "FAILED", 60*time.Second)
	for _, s := range append([]string{"train"}, evalNames...) {
		if s != "eval2" {
			alice.waitStatus(runs[s], "SUCCEEDED", 60*time.Second)
		}
	}
	rep := alice.waitStatus(runs["report"], "CANCELLED", 30*time.Second)
	if !strings.Contains(rep.Error, runs["eval2"]) {
		t.Fatalf("report cancelled with %q, want eval2 (%s) named", rep.Error, runs["eval2"])
	}
	text, err := alice.logText(runs["eval2"])
	if err != nil || !strings.Contains(text, "eval of "+runs["train"]+" model weights-42") {
		t.Fatalf("eval2's log %q, %v: want train's model, then its failure", text, err)
	}
	text, err = alice.logText(runs["eval1"])
	if err != nil || !strings.Contains(text, "eval of "+runs["train"]+" model weights-42") {
		t.Fatalf("eval1's log %q, %v: want train's model from RLSCHED_INPUT_DIR", text, err)
	}
	// Each eval started within a second of train's end.
	times := map[string]struct{ StartedAt, FinishedAt *time.Time }{}
	for _, s := range append([]string{"train"}, evalNames...) {
		var tk struct{ StartedAt, FinishedAt *time.Time }
		alice.Must("GET", "/api/tasks/"+runs[s], nil, 200, &tk)
		times[s] = tk
	}
	for _, s := range evalNames {
		d := times[s].StartedAt.Sub(*times["train"].FinishedAt)
		t.Logf("%s started %v after train ended", s, d)
		if d > 2*time.Second { // the goal is 1 s; the margin is the worker's process start on a busy CI machine
			t.Errorf("%s started %v after train ended, want about a second at most", s, d)
		}
	}

	shown := cli(0, "pipeline", "show", pid)
	for _, want := range []string{"train  SUCCEEDED  " + runs["train"], "├─ eval2  FAILED", "report  CANCELLED", "reason dependency"} {
		if !strings.Contains(shown, want) {
			t.Fatalf("pipeline show lacks %q:\n%s", want, shown)
		}
	}
	out = cli(0, "pipeline", "retry", pid)
	re := regexp.MustCompile(`(?m)^(\S+) (r[0-9a-f]+)$`)
	rerun := map[string]string{}
	for _, mm := range re.FindAllStringSubmatch(out, -1) {
		rerun[mm[1]] = mm[2]
		b.track(mm[2])
	}
	if len(rerun) != 2 || rerun["eval2"] == "" || rerun["report"] == "" {
		t.Fatalf("pipeline retry reran %v, want eval2 and report only:\n%s", rerun, out)
	}
	alice.waitStatus(rerun["eval2"], "SUCCEEDED", 60*time.Second)
	alice.waitStatus(rerun["report"], "SUCCEEDED", 60*time.Second)
	text, err = alice.logText(rerun["report"])
	parents := make([]string, evals)
	for i, s := range evalNames {
		parents[i] = runs[s]
	}
	parents[1] = rerun["eval2"]
	if err != nil || !strings.Contains(text, "report after "+strings.Join(parents, ",")) {
		t.Fatalf("report's log %q, %v: want the kept evals and the new eval2 as its parents", text, err)
	}
	alice.Must("GET", "/api/pipelines/"+pid, nil, 200, &p)
	for _, s := range p.Steps {
		if s.Status != "SUCCEEDED" {
			t.Errorf("step %s is %s after the retry", s.Name, s.Status)
		}
		if want := runs[s.Name]; rerun[s.Name] != "" {
			want = rerun[s.Name]
			if s.Run != want {
				t.Errorf("step %s runs %s, want %s", s.Name, s.Run, want)
			}
		} else if s.Run != want {
			t.Errorf("kept step %s runs %s, want %s", s.Name, s.Run, want)
		}
	}
}
