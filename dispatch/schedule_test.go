package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
)

// TestScheduleLooksPastAStuckPage: a full page of queued runs that fit
// nowhere must not starve a run further back that fits.
func TestScheduleLooksPastAStuckPage(t *testing.T) {
	h := newClockedHarness(t, nil)
	base := time.Now().Add(-time.Hour)
	var ts []*core.Task
	for i := range plan.Batch + 20 {
		ts = append(ts, &core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: []string{"x"}, GPUs: 4,
			Attempt: 1, MaxRetries: 1, TraceID: core.NewTraceID(), Status: core.StatusQueued,
			CreatedAt: base.Add(time.Duration(i) * time.Millisecond)})
	}
	for i, err := range h.st.CreateTasks(context.Background(), ts) {
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	small := h.queueRun(t, 1, 0, base.Add(time.Minute))

	p := dial(t, h.m.Addr())
	p.hello("w", 0, 2)
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex.TaskId != small.ID {
		t.Fatalf("started %s, want the 1-GPU run %s behind %d runs needing 4 GPUs", ex.TaskId, small.ID, len(ts))
	}
}
