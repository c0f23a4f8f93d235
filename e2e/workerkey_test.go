package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// TestWorkerKey: `rlsched worker-key w1`, run where the join token is,
// prints a key with which a machine that holds no join token joins as w1
// and runs; the same key under another id is refused, as is an id outside
// the master's WORKER_IDS even with the join token, each with a logged
// reason on both sides. No fence reaches the REST API.
func TestWorkerKey(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data"), Env: []string{"WORKER_IDS=w1,w2"}})

	wk := b.Start("worker-key", b.ServerEnv("WORKER_JOIN_TOKEN="+b.JoinToken), "worker-key", "w1")
	select {
	case <-wk.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("rlsched worker-key did not exit")
	}
	key := strings.TrimSpace(wk.Stdout())
	if wk.Err() != nil || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(key) {
		t.Fatalf("rlsched worker-key w1: %v, printed %q (stderr %q), want 64 hex digits", wk.Err(), key, wk.Stderr())
	}
	keyFile := filepath.Join(b.Dir, "w1.key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	worker := func(id string) *proc {
		return b.Start("worker-"+id, b.ServerEnv("WORKER_KEY_FILE="+keyFile), rig.WorkerArgs(m.RPC, id, 1, 0, filepath.Join(b.Dir, "worker-"+id))...)
	}
	worker("w1")
	m.WaitJoined(t, "w1")
	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	id, _ := b.submit(alice, map[string]any{"command": []string{"python3", "-c", "print('ok')"}})
	if tk := alice.waitStatus(id, "SUCCEEDED", 30*time.Second); tk.Worker != "w1" {
		t.Errorf("the run ran on %q, want w1", tk.Worker)
	}
	if r := alice.Must("GET", "/api/tasks/"+id, nil, 200, nil); strings.Contains(strings.ToLower(string(r.Body)), "fence") {
		t.Errorf("the task's JSON shows its fence: %s", r)
	}

	// w1's key, given to a machine that claims to be w2.
	w2 := worker("w2")
	l := m.WaitLog(t, 20*time.Second, "the refusal of w2", func(l logLine) bool {
		return strings.HasPrefix(l.Msg(), "closing connection:") && strings.Contains(l.Str("error"), `worker "w2"`)
	})
	if !strings.Contains(l.Msg(), "worker refused") || !strings.Contains(l.Str("error"), "is not sealed with that worker's key") {
		t.Errorf("w2's refusal logged as %v", l)
	}
	w2.WaitLog(t, 10*time.Second, "that w2 was refused", func(l logLine) bool { return strings.Contains(l.Msg(), "master refused this worker") })
	w2.Kill(t)

	// The join token does not help an id the master does not list.
	w3 := b.StartWorker("worker-w3", m.RPC, rig.WorkerOpts{ID: "w3"})
	m.WaitLog(t, 20*time.Second, "the refusal of w3", func(l logLine) bool {
		return l.Msg() == "closing connection: worker refused" && strings.Contains(l.Str("error"), `worker id "w3" is not in this master's WORKER_IDS`)
	})
	w3.Kill(t)
	var ws struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	if r := alice.Must("GET", "/api/workers", nil, 200, &ws); len(ws.Items) != 1 || ws.Items[0].ID != "w1" {
		t.Errorf("workers: %s; want only w1", r)
	}
}
