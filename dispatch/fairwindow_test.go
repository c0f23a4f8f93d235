package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// TestHeldRunsDoNotStallTheQueue (issue 25): 30,000 older runs of one user
// that cannot start (15,000 too large for any worker, 15,000 members of a
// sweep at its maxParallel) no longer fill the window the scheduler reads:
// another user's run starts at once beside them.
func TestHeldRunsDoNotStallTheQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("30,000 runs")
	}
	h := newClockedHarness(t, nil) // no session goes silent while 30,000 runs are written
	ctx := context.Background()
	alice, bob := h.owner, h.newUser(t, "bob")
	base := time.Now().Add(-time.Hour)
	const each = 15000
	big := make([]*core.Task, 0, 1000)
	for i := range each {
		big = append(big, &core.Task{ID: core.NewTaskID(), UserID: alice.ID, Command: []string{"x"}, GPUs: 8, Attempt: 1,
			MaxRetries: 1, TraceID: core.NewTraceID(), CreatedAt: base.Add(time.Duration(i) * time.Microsecond)})
		if len(big) == cap(big) || i == each-1 {
			for _, err := range h.st.CreateTasks(ctx, big) {
				if err != nil {
					t.Fatal(err)
				}
			}
			big = big[:0]
		}
	}
	members := make([]*core.Task, each)
	for i := range members {
		members[i] = &core.Task{ID: core.NewTaskID(), UserID: alice.ID, Command: []string{"x"}, GPUs: 1, Attempt: 1,
			MaxRetries: 1, TraceID: core.NewTraceID(), CreatedAt: base.Add(time.Duration(i) * time.Microsecond)}
	}
	sw := &store.Sweep{ID: core.NewSweepID(), UserID: alice.ID, MaxParallel: 1, CreatedAt: base}
	if err := h.st.CreateSweep(ctx, sw, members); err != nil {
		t.Fatal(err)
	}
	p := dial(t, h.m.Addr())
	p.hello("w", 0, 2) // 2 GPUs: one for a member, one free
	h.m.Notify()
	if ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask); ex.TaskId != members[0].ID {
		t.Fatalf("started %s, want the sweep's first member %s", ex.TaskId, members[0].ID)
	}
	start := time.Now()
	b := h.runOf(t, bob, 1, time.Now())
	h.m.Queued(b)
	if ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask); ex.TaskId != b.ID {
		t.Fatalf("started %s, want bob's %s", ex.TaskId, b.ID)
	}
	t.Logf("bob's run started %v after its submission, beside %d held runs", time.Since(start), 2*each-1)
}
