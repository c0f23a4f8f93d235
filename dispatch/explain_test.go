package dispatch

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
	"github.com/rlsched/rlsched/httpapi"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// The master's REST layer takes the dispatcher as its Control and asks it
// through this interface; no wiring beyond that.
var _ httpapi.QueueExplainer = (*Dispatcher)(nil)

// queueRun stores a QUEUED run with a fixed creation time, so runs of one
// priority have a known order (ids made in one millisecond do not).
func (h *harness) queueRun(t *testing.T, gpus, prio int, created time.Time) core.Task {
	t.Helper()
	task := core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: []string{"x"}, GPUs: gpus, Priority: prio,
		Attempt: 1, MaxRetries: 1, TraceID: core.NewTraceID(), Status: core.StatusQueued, CreatedAt: created}
	if err := h.st.CreateTask(context.Background(), &task); err != nil {
		t.Fatal(err)
	}
	h.m.Notify()
	return task
}

// explainNow asks Explain until want holds for every run (a cached answer
// may be up to explainTTL old) and fails with the last answer otherwise.
func explainNow(t *testing.T, m *Dispatcher, runs []core.Task, want map[string]core.QueueInfo) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() (bool, string) {
		got := m.Explain(context.Background(), runs)
		var why strings.Builder
		for _, r := range runs {
			if got[r.ID] != want[r.ID] {
				fmt.Fprintf(&why, "\nrun %s (%d GPUs, prio %d): got %+v, want %+v", r.ID, r.GPUs, r.Priority, got[r.ID], want[r.ID])
			}
		}
		if len(got) != len(want) {
			fmt.Fprintf(&why, "\n%d runs explained, want %d", len(got), len(want))
		}
		return why.Len() == 0, "Explain's answer differs:" + why.String()
	})
}

// TestExplainMatchesScheduler predicts a scheduling pass from the plan,
// lets the real scheduler run it, and checks both agree; then the runs left
// queued get the reasons the scheduler's state gives them.
func TestExplainMatchesScheduler(t *testing.T) {
	h := newClockedHarness(t, nil)
	base := time.Now().Add(-time.Hour)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	// Store order: p1, p2 (priority 5), then p3..p6 by age.
	p1 := h.queueRun(t, 2, 5, at(1))
	p2 := h.queueRun(t, 2, 5, at(2))
	p3 := h.queueRun(t, 4, 0, at(0))
	p4 := h.queueRun(t, 1, 0, at(3))
	p5 := h.queueRun(t, 0, 0, at(4))
	p6 := h.queueRun(t, 0, 0, at(5))
	all := []core.Task{p1, p2, p3, p4, p5, p6}

	// Explain runs beside the scheduler and the sessions throughout (-race).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				h.m.Explain(context.Background(), all)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	want := map[string]core.QueueInfo{}
	for i, r := range all {
		want[r.ID] = core.QueueInfo{Position: i + 1, Reason: "no worker is connected", Code: plan.CodeNoWorker}
	}
	explainNow(t, h.m, all, want)

	// What the plan says one worker with 3 GPUs and 1 CPU slot will get.
	queue, err := h.st.QueuedTasks(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	w := plan.Snapshot{Connected: 1, MaxGPUs: 3, MaxSlots: 1,
		Free: []plan.Worker{{ID: "w", FreeGPUs: []int{0, 1, 2}, FreeSlots: 1}}}
	predicted := map[string]bool{}
	for id, qi := range plan.Plan(w, queue).Waiting {
		if qi.Reason == "starting on w" {
			predicted[id] = true
		}
	}
	if len(predicted) != 3 || !predicted[p1.ID] || !predicted[p4.ID] || !predicted[p5.ID] {
		t.Fatalf("the plan predicts %v; want p1, p4 and p5", predicted)
	}

	p := dial(t, h.m.Addr())
	p.hello("w", 1, 3)
	started := map[string]bool{}
	for len(started) < len(predicted) {
		ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
		if !predicted[ex.TaskId] {
			t.Fatalf("the scheduler started %s, which the plan said waits", ex.TaskId)
		}
		started[ex.TaskId] = true
	}

	left := []core.Task{p2, p3, p6}
	explainNow(t, h.m, left, map[string]core.QueueInfo{
		p2.ID: {Position: 1, Reason: "needs 2 GPUs, every GPU is busy", Code: plan.CodeResources},
		p3.ID: {Position: 2, Reason: "needs 4 GPUs, no worker has that many (the largest has 3)", Code: plan.CodeNoWorker},
		p6.ID: {Position: 3, Reason: "needs a CPU slot, every slot is busy", Code: plan.CodeResources},
	})
	// The 1-GPU run ends: one GPU is free, still not the two p2 needs.
	ex4 := h.task(t, p4.ID)
	p.send(&pb.TaskFinished{TaskId: p4.ID, Attempt: 1, Fence: ex4.Fence, Outcome: pb.Outcome_OUTCOME_EXITED})
	p.expect(&pb.TaskFinishedAck{})
	explainNow(t, h.m, left, map[string]core.QueueInfo{
		p2.ID: {Position: 1, Reason: "needs 2 GPUs, the largest free block is 1", Code: plan.CodeResources},
		p3.ID: {Position: 2, Reason: "needs 4 GPUs, no worker has that many (the largest has 3)", Code: plan.CodeNoWorker},
		p6.ID: {Position: 3, Reason: "needs a CPU slot, every slot is busy", Code: plan.CodeResources},
	})

	// The worker goes away: nothing can start.
	p.c.Close()
	explainNow(t, h.m, left, map[string]core.QueueInfo{
		p2.ID: {Position: 1, Reason: "no worker is connected", Code: plan.CodeNoWorker},
		p3.ID: {Position: 2, Reason: "no worker is connected", Code: plan.CodeNoWorker},
		p6.ID: {Position: 3, Reason: "no worker is connected", Code: plan.CodeNoWorker},
	})
}

func TestExplainNewRunIsNotServedFromCache(t *testing.T) {
	h := newHarness(t, nil)
	a := h.queueRun(t, 1, 0, time.Time{})
	if got := h.m.Explain(context.Background(), []core.Task{a}); got[a.ID].Position != 1 {
		t.Fatalf("got %+v", got)
	}
	// Within explainTTL of the first answer, a run it did not know.
	b := h.queueRun(t, 1, 9, time.Time{})
	got := h.m.Explain(context.Background(), []core.Task{a, b})
	if got[b.ID].Position != 1 || got[a.ID].Position != 2 {
		t.Fatalf("got %+v", got)
	}
	// Runs the store no longer has queued get no explanation.
	if got := h.m.Explain(context.Background(), []core.Task{{ID: "gone", Status: core.StatusQueued}}); len(got) != 0 {
		t.Fatalf("got %+v", got)
	}
}
