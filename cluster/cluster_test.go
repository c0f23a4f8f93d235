package cluster

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testsvc"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

type recSink struct {
	mu      sync.Mutex
	tasks   []core.Task
	workers []core.WorkerInfo
}

func (s *recSink) TaskChanged(t core.Task) {
	s.mu.Lock()
	s.tasks = append(s.tasks, t)
	s.mu.Unlock()
}

func (s *recSink) WorkerChanged(w core.WorkerInfo) {
	s.mu.Lock()
	s.workers = append(s.workers, w)
	s.mu.Unlock()
}

func (s *recSink) taskCount(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.tasks {
		if t.ID == id {
			n++
		}
	}
	return n
}

type member struct {
	n       *Node
	sink    *recSink
	mu      sync.Mutex
	local   []core.WorkerInfo
	cancels []string
	wakes   int
}

func (m *member) workers() []core.WorkerInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]core.WorkerInfo(nil), m.local...)
}

func join(t *testing.T, addr, prefix, id string, snap time.Duration) *member {
	t.Helper()
	m := &member{sink: &recSink{}}
	n, err := New(Config{Addr: addr, Prefix: prefix, MasterID: id, Local: m.sink, SnapshotInterval: snap})
	if err != nil {
		t.Fatal(err)
	}
	n.Attach(Hooks{Workers: m.workers, Cancel: func(id string) {
		m.mu.Lock()
		m.cancels = append(m.cancels, id)
		m.mu.Unlock()
	}, Task: func(t core.Task) {
		if t.Status == core.StatusQueued {
			m.mu.Lock()
			m.wakes++
			m.mu.Unlock()
		}
	}})
	n.Start()
	m.n = n
	return m
}

// TestTwoMasters: events cross once, cancels are delivered, and each
// master's worker list shows the other's workers, the connected view
// winning over a stale one, until the other master goes silent.
func TestTwoMasters(t *testing.T) {
	addr := testsvc.RequireRedis(t)
	prefix := fmt.Sprintf("cluster-test-%d", time.Now().UnixNano())
	snap := 100 * time.Millisecond
	a := join(t, addr, prefix, "A", snap)
	b := join(t, addr, prefix, "B", snap)
	defer b.n.Close()
	// Wait until both subscriptions carry messages: B sees A's snapshots.
	testutil.WaitFor(t, 10*time.Second, "subscriptions up", func() bool {
		a.n.TaskChanged(core.Task{ID: "probe", Status: core.StatusRunning})
		return b.sink.taskCount("probe") > 0
	})

	a.n.TaskChanged(core.Task{ID: "r1", Status: core.StatusQueued, Fence: 5})
	testutil.WaitFor(t, 10*time.Second, "B sees r1", func() bool { return b.sink.taskCount("r1") == 1 })
	b.sink.mu.Lock()
	for _, tk := range b.sink.tasks {
		if tk.ID == "r1" && tk.Fence != 5 {
			t.Errorf("B got r1 with fence %d, want 5: masters exchange the fence", tk.Fence)
		}
	}
	b.sink.mu.Unlock()
	if n := a.sink.taskCount("r1"); n != 1 {
		t.Fatalf("A's own clients got r1 %d times, want once", n)
	}
	b.mu.Lock()
	wakes := b.wakes
	b.mu.Unlock()
	if wakes == 0 {
		t.Error("a run queued on A did not wake B's scheduler")
	}

	a.n.Cancel("r1")
	testutil.WaitFor(t, 10*time.Second, "B gets the cancel", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.cancels) == 1 && b.cancels[0] == "r1"
	})

	now := time.Now()
	a.mu.Lock()
	a.local = []core.WorkerInfo{{ID: "w1", State: core.WorkerRunning, Master: "A", LastHeartbeatAt: now}}
	a.mu.Unlock()
	// B recovered a run of w1, so it has a stale view of it.
	b.mu.Lock()
	b.local = []core.WorkerInfo{{ID: "w1", State: core.WorkerPending, Master: "B"}, {ID: "w2", State: core.WorkerIdle, Master: "B", LastHeartbeatAt: now}}
	b.mu.Unlock()
	a.n.WorkerChanged(a.local[0])
	for _, m := range []*member{a, b} {
		testutil.WaitFor(t, 10*time.Second, "merged worker list", func() bool {
			ws := m.n.Workers()
			return len(ws) == 2 && ws[0].ID == "w1" && ws[0].Master == "A" && ws[1].ID == "w2" && ws[1].Master == "B"
		})
	}
	// B's stale view of w1 is not published: it would show w1 as gone.
	b.n.WorkerChanged(core.WorkerInfo{ID: "w1", State: core.WorkerPending, Master: "B"})

	a.n.Close()
	testutil.WaitFor(t, 10*time.Second, "A's workers expire on B", func() bool {
		ws := b.n.Workers()
		return len(ws) == 2 && ws[0].ID == "w1" && ws[0].Master == "B"
	})
	a.sink.mu.Lock()
	defer a.sink.mu.Unlock()
	for _, w := range a.sink.workers {
		if w.ID == "w1" && w.Master == "B" {
			t.Fatalf("A's clients saw B's stale view of w1: %+v", w)
		}
	}
}
