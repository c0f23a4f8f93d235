package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// attemptScript prints "start N", sleeps (long on attempt 1, short after)
// and prints "done N": attempt 1 can only end by being killed.
const attemptScript = `import os, time
a = os.environ["RLSCHED_ATTEMPT"]
print("start", a, flush=True)
time.sleep(120 if a == "1" else 3)
print("done", a, flush=True)
`

// TestWorkerKilledRunRequeued: a SIGKILLed worker's run is killed by the
// worker's orphan guard, goes back to the queue (attempt 2) once its lease
// expires, and succeeds on another worker; the log shows both attempts.
func TestWorkerKilledRunRequeued(t *testing.T) {
	b := newBed(t)
	data := filepath.Join(b.Dir, "data")
	m := b.StartMaster("master", rig.MasterOpts{DataDir: data})
	w1 := b.StartWorker("worker-w1", m.RPC, rig.WorkerOpts{ID: "w1"})
	m.WaitJoined(t, "w1")
	alice, _ := signup(t, m.URL, "alice", "ADMIN")

	id, traceID := b.submit(alice, map[string]any{"command": []string{"python3", "-c", attemptScript}, "maxRetries": 1})
	alice.waitStatus(id, "RUNNING", 30*time.Second)
	ps := waitRunProcs(t, id, 1, 10*time.Second)
	pgid := ps[0].pgid
	alice.waitLogContains(id, "start 1\n", 15*time.Second)

	w1.Kill(t)
	killed := time.Now()
	testutil.Eventually(t, 5*time.Second, func() (bool, string) {
		return groupGone(pgid), fmt.Sprintf("run %s (group %d) outlived its SIGKILLed worker", id, pgid)
	})
	t.Logf("run's process group gone %v after the worker died", time.Since(killed).Round(time.Millisecond))
	// Who killed it (Pdeathsig on the direct child, or the guard for the
	// whole group) is a race; worker/orphan_test.go covers the guard alone.

	// LOST is transient: the run is requeued with attempt 2 after the lease TTL.
	seen := map[string]bool{}
	tk := alice.waitTask(id, time.Duration(taskTTLSeconds+10)*time.Second, "QUEUED with attempt 2", func(tk task) bool {
		seen[tk.Status] = true
		return tk.Status == "QUEUED" && tk.Attempt == 2
	})
	t.Logf("requeued %v after the worker died; statuses seen: %v", time.Since(killed).Round(time.Millisecond), keys(seen))
	if tk.Worker != "" {
		t.Errorf("requeued run still names worker %q", tk.Worker)
	}
	for st := range seen {
		if st != "RUNNING" && st != "LOST" && st != "QUEUED" {
			t.Errorf("run passed through %s between RUNNING and QUEUED", st)
		}
	}
	testutil.Eventually(t, 10*time.Second, func() (bool, string) {
		r, err := alice.Do("GET", "/api/workers", nil)
		if err != nil {
			return false, err.Error()
		}
		var ws struct {
			Items []struct {
				ID           string   `json:"id"`
				State        string   `json:"state"`
				RunningTasks []string `json:"runningTasks"`
			} `json:"items"`
		}
		if err := json.Unmarshal(r.Body, &ws); err != nil {
			return false, err.Error()
		}
		for _, w := range ws.Items {
			if w.ID == "w1" {
				return w.State == "DOWN" && len(w.RunningTasks) == 0, fmt.Sprintf("w1 is %+v, want DOWN", w)
			}
		}
		return false, "w1 missing from /api/workers: " + string(r.Body)
	})

	// Another worker picks it up and attempt 2 succeeds.
	b.StartWorker("worker-w2", m.RPC, rig.WorkerOpts{ID: "w2"})
	m.WaitJoined(t, "w2")
	tk = alice.waitStatus(id, "SUCCEEDED", 30*time.Second)
	if tk.Attempt != 2 || tk.Worker != "w2" || tk.ExitCode == nil || *tk.ExitCode != 0 {
		t.Fatalf("finished run: %v; want attempt 2 on w2, exit code 0", tk)
	}

	file := logFile(t, data, id)
	want := "TRACE_ID:" + traceID + "\nstart 1\n=== rlsched attempt 2 ===\nstart 2\ndone 2\n"
	if file != want {
		t.Errorf("log file:\n%s\nwant:\n%s", file, want)
	}
	if raw, err := alice.logText(id); err != nil || raw != file {
		t.Errorf("REST log differs from the file (err %v):\n%s", err, raw)
	}
}
