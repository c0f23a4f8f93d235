package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// frozenAttempts maps the pid of each live process of a run to its attempt
// (RLSCHED_ATTEMPT in its environment).
func frozenAttempts(taskID string) map[int]int {
	out := map[int]int{}
	for _, p := range runProcs(taskID) {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.pid))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if a, ok := bytes.CutPrefix(kv, []byte("RLSCHED_ATTEMPT=")); ok {
				n, _ := strconv.Atoi(string(a))
				out[p.pid] = n
			}
		}
	}
	return out
}

// TestLeaseFrozenWorker is issue 11's first measurement: a worker stopped
// with SIGSTOP (its process group, as Ctrl-Z does) for longer than the lease
// TTL. Its run's processes are children of the frozen worker but not frozen
// themselves; the guard must kill them by the lease deadline, before the
// master starts attempt 2 on the other worker, without the worker ever
// running again. Before, the attempts overlapped for ≈ 12 s.
func TestLeaseFrozenWorker(t *testing.T) {
	const slack = 3 * time.Second // scheduling on a loaded machine
	ttl := time.Duration(taskTTLSeconds) * time.Second
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "master")})
	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	workers := map[string]*proc{}
	for _, id := range []string{"wa", "wb"} {
		workers[id] = b.StartWorker("worker-"+id, m.RPC, rig.WorkerOpts{ID: id, Slots: 1})
		m.WaitJoined(t, id)
	}
	gate := filepath.Join(b.Dir, "gate")
	id, _ := b.submit(alice, map[string]any{"command": []string{"sh", "-c", "sleep 600 & " + gateScript},
		"env": map[string]string{"GATE": gate}, "maxRetries": 2})
	tk := alice.waitStatus(id, "RUNNING", 30*time.Second)
	first := waitRunProcs(t, id, 2, 10*time.Second)
	frozen := workers[tk.Worker]
	if frozen == nil {
		t.Fatalf("run on unknown worker %q", tk.Worker)
	}

	if err := syscall.Kill(-frozen.Cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// The last renewal the worker sent was before the stop, so the lease
	// deadline is at most one TTL after it.
	var gone time.Time
	testutil.Eventually(t, ttl+30*time.Second, func() (bool, string) {
		as := frozenAttempts(id)
		first1 := 0
		second := false
		for _, a := range as {
			switch {
			case a == 1:
				first1++
			case a > 1:
				second = true
			}
		}
		if first1 == 0 && gone.IsZero() {
			gone = time.Now()
		}
		if second && first1 > 0 {
			t.Fatalf("attempt 2 runs while %d process(es) of attempt 1 still run: %v", first1, as)
		}
		return second, fmt.Sprintf("run processes by attempt: %v; want attempt 2 running", as)
	})
	if late := gone.Sub(stopped); late > ttl+slack {
		t.Errorf("attempt 1 was gone %v after its worker froze; want at most the %v lease TTL + %v", late, ttl, slack)
	}
	if st, ok := procStat(frozen.Cmd.Process.Pid); !ok || st.state != 'T' {
		t.Fatalf("the frozen worker is not stopped any more (%c): the test needs it stopped throughout", st.state)
	}
	for _, p := range first {
		if !groupGone(p.pgid) {
			t.Errorf("process group %d of attempt 1 still has live members", p.pgid)
		}
	}

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	done := alice.waitStatus(id, "SUCCEEDED", 30*time.Second)
	if done.Attempt != 2 || done.Worker == tk.Worker {
		t.Errorf("run: %v; want attempt 2 on the worker that was not frozen", done)
	}
}
