package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// tickScript prints a line and a metric each second for 6 s, then "end".
const tickScript = `import time
for i in range(6):
    print("line %d" % i, flush=True)
    print('RLSCHED_METRIC {"step": %d, "tick": %d}' % (i, i * 10), flush=True)
    time.sleep(1)
print("end", flush=True)
`

func tickLog() string {
	var sb strings.Builder
	for i := 0; i < 6; i++ {
		fmt.Fprintf(&sb, "line %d\nRLSCHED_METRIC {\"step\": %d, \"tick\": %d}\n", i, i, i*10)
	}
	sb.WriteString("end\n")
	return sb.String()
}

// startPinned starts master-1 on ports of its own, which a second master
// started with the same options takes again, with worker w1 and user alice.
func (b *bed) startPinned(t *testing.T) (rig.MasterOpts, *master, *client) {
	t.Helper()
	o := rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data"), HTTPPort: rig.FreePort(t), RPCPort: rig.FreePort(t)}
	m1 := b.StartMaster("master-1", o)
	b.StartWorker("worker-w1", m1.RPC, rig.WorkerOpts{ID: "w1"})
	m1.WaitJoined(t, "w1")
	alice, _ := signup(t, m1.URL, "alice", "ADMIN")
	return o, m1, alice
}

// TestMasterRestartLosesNoRun: the master is SIGKILLed while a run is
// running and restarted on the same data dir and ports; the worker
// reconnects and the master re-adopts the run, which succeeds as attempt 1
// with every output line and metric point exactly once.
func TestMasterRestartLosesNoRun(t *testing.T) {
	b := newBed(t)
	pinned, m1, alice := b.startPinned(t)
	data := pinned.DataDir

	id, traceID := b.submit(alice, map[string]any{"command": []string{"python3", "-c", tickScript}})
	alice.waitStatus(id, "RUNNING", 30*time.Second)
	ps := waitRunProcs(t, id, 1, 10*time.Second)
	alice.waitLogContains(id, "line 1\n", 15*time.Second)

	m1.Kill(t)
	restarted := time.Now()
	// The crashed master's connections linger in TIME_WAIT on the RPC port:
	// the new master must still be able to listen there (SO_REUSEADDR).
	m2 := b.StartMaster("master-2", pinned)
	if m2.URL != m1.URL || m2.RPC != m1.RPC {
		t.Fatalf("restarted master on %s/%s, want %s/%s", m2.URL, m2.RPC, m1.URL, m1.RPC)
	}
	joined := m2.WaitJoined(t, "w1")
	t.Logf("worker rejoined %v after the restart: %v", time.Since(restarted).Round(time.Millisecond), joined)
	if joined.Str("adopted") != "1" || joined.Str("killed") != "0" {
		t.Errorf("rejoin: %v; want the run adopted, none killed", joined)
	}
	if rp := runProcs(id); len(rp) > 0 && rp[0].pid != ps[0].pid {
		t.Errorf("run %s now has pid %d, was %d: it was restarted", id, rp[0].pid, ps[0].pid)
	}

	tk := alice.waitStatus(id, "SUCCEEDED", 30*time.Second)
	if tk.Attempt != 1 || tk.Worker != "w1" || tk.ExitCode == nil || *tk.ExitCode != 0 {
		t.Fatalf("finished run: %v; want attempt 1 on w1, exit code 0", tk)
	}
	file := logFile(t, data, id)
	if want := "TRACE_ID:" + traceID + "\n" + tickLog(); file != want {
		t.Errorf("log file after a master restart:\n%s\nwant every line once:\n%s", file, want)
	}
	var metrics struct {
		Series map[string][][2]float64 `json:"series"`
	}
	alice.Must("GET", "/api/tasks/"+id+"/metrics?names=tick", nil, 200, &metrics)
	if got := fmt.Sprint(metrics.Series["tick"]); got != "[[0 0] [1 10] [2 20] [3 30] [4 40] [5 50]]" {
		t.Errorf("tick metric after a master restart: %s; want each step once", got)
	}
	if tk.FinalReward != nil {
		t.Errorf("finalReward %v for a run without FINAL_REWARD or episode_reward", *tk.FinalReward)
	}
}

// TestMasterRestartRequeuesOrphanedRun: master and worker are both
// SIGKILLed while runs are running; the restarted master gives the worker
// one lease TTL to come back, then requeues the run with retries left
// (attempt 2) and fails the one without.
func TestMasterRestartRequeuesOrphanedRun(t *testing.T) {
	b := newBed(t)
	data := filepath.Join(b.Dir, "data")
	m1 := b.StartMaster("master-1", rig.MasterOpts{DataDir: data})
	w1 := b.StartWorker("worker-w1", m1.RPC, rig.WorkerOpts{ID: "w1"})
	m1.WaitJoined(t, "w1")
	alice, _ := signup(t, m1.URL, "alice", "ADMIN")

	retry, _ := b.submit(alice, map[string]any{"command": []string{"sleep", "600"}, "maxRetries": 1})
	once, _ := b.submit(alice, map[string]any{"command": []string{"sleep", "601"}, "maxRetries": 0})
	var groups []int
	for _, id := range []string{retry, once} {
		alice.waitStatus(id, "RUNNING", 30*time.Second)
		groups = append(groups, waitRunProcs(t, id, 1, 10*time.Second)[0].pgid)
	}

	w1.Kill(t)
	m1.Kill(t)
	for i, pg := range groups {
		testutil.Eventually(t, 5*time.Second, func() (bool, string) {
			return groupGone(pg), fmt.Sprintf("run %d (group %d) outlived its SIGKILLed worker", i, pg)
		})
	}

	restarted := time.Now()
	m2 := b.StartMaster("master-2", rig.MasterOpts{DataDir: data})
	m2.WaitLog(t, 10*time.Second, "waiting for workers to re-adopt", func(l logLine) bool {
		return strings.HasPrefix(l.Msg(), "waiting for workers to re-adopt") && l.Str("runs") == "2"
	})
	c2 := alice.as(alice.Token)
	c2.Base = m2.URL
	ttl := time.Duration(taskTTLSeconds) * time.Second

	tk := c2.waitTask(retry, ttl+10*time.Second, "QUEUED with attempt 2", func(tk task) bool {
		return tk.Status == "QUEUED" && tk.Attempt == 2
	})
	took := time.Since(restarted)
	t.Logf("requeued %v after the master restart", took.Round(time.Millisecond))
	if took < ttl-500*time.Millisecond {
		t.Errorf("requeued %v after the restart: the worker had no lease TTL (%v) to come back", took, ttl)
	}
	if tk.Worker != "" {
		t.Errorf("requeued run still names worker %q", tk.Worker)
	}
	tk = c2.waitStatus(once, "FAILED", 10*time.Second)
	if tk.Attempt != 1 || !strings.Contains(tk.Error, "lost") {
		t.Errorf("run without retries: %v; want FAILED, attempt 1, an error saying it was lost", tk)
	}
}
