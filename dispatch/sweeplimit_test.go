package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/store"
)

// TestSweepLimitHoldsMembers: of a sweep with maxParallel 2 on a worker
// with room for all its members, two run; the others wait with
// sweep_limit, and one starts when a running member ends.
func TestSweepLimitHoldsMembers(t *testing.T) {
	h := newClockedHarness(t, nil)
	base := time.Now().Add(-time.Hour)
	var ms []*core.Task
	for i := range 4 {
		ms = append(ms, &core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: []string{"x"}, Attempt: 1,
			MaxRetries: 1, TraceID: core.NewTraceID(), CreatedAt: base.Add(time.Duration(i) * time.Millisecond)})
	}
	sw := &store.Sweep{ID: core.NewSweepID(), UserID: h.owner.ID, MaxParallel: 2, CreatedAt: base}
	if err := h.st.CreateSweep(context.Background(), sw, ms); err != nil {
		t.Fatal(err)
	}
	h.m.Notify()
	p := dial(t, h.m.Addr())
	p.hello("w", 8, 0)
	first := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.expect(&pb.ExecuteTask{})
	testutil.WaitFor(t, 10*time.Second, "both placements recorded", func() bool {
		c, err := h.st.SweepLimits(context.Background(), []string{sw.ID})
		return err == nil && c[sw.ID].Active == 2
	})
	held := core.QueueInfo{Code: plan.CodeSweepLimit, Reason: "its sweep " + sw.ID + " has 2 of at most 2 members running (maxParallel)"}
	rest := []core.Task{h.task(t, ms[2].ID), h.task(t, ms[3].ID)}
	held1, held2 := held, held
	held1.Position, held2.Position = 1, 2
	explainNow(t, h.m, rest, map[string]core.QueueInfo{ms[2].ID: held1, ms[3].ID: held2})

	p.send(&pb.TaskStarted{TaskId: first.TaskId, Attempt: 1, Fence: first.Fence, Pid: 1})
	p.send(&pb.TaskFinished{TaskId: first.TaskId, Attempt: 1, Fence: first.Fence, Outcome: pb.Outcome_OUTCOME_EXITED})
	if ex := p.expectEach(&pb.TaskFinishedAck{}, &pb.ExecuteTask{})[1].(*pb.ExecuteTask); ex.TaskId != ms[2].ID {
		t.Fatalf("started %s after a member ended, want the next member %s", ex.TaskId, ms[2].ID)
	}
	explainNow(t, h.m, []core.Task{h.task(t, ms[3].ID)}, map[string]core.QueueInfo{ms[3].ID: held1})
}
