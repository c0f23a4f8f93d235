package dispatch

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/store"
)

// heldStore holds the commit of one batch while armed and counts the rows
// written per run. It is not a TaskWriter, so a Batcher over it has a
// lane per kind, as on MySQL.
type heldStore struct {
	store.Store
	mu      sync.Mutex
	rows    map[string]int
	hold    chan struct{} // closed: let the held batch commit
	armed   bool
	entered chan struct{}
}

func (s *heldStore) UpdateTasks(ctx context.Context, us []store.Update) []error {
	s.mu.Lock()
	held := s.armed
	s.armed = false
	s.mu.Unlock()
	if held {
		s.entered <- struct{}{}
		<-s.hold
	}
	errs := s.Store.UpdateTasks(ctx, us)
	s.mu.Lock()
	for i, u := range us {
		if errs[i] == nil {
			s.rows[u.Task.ID]++
		}
	}
	s.mu.Unlock()
	return errs
}

// TestFinishSupersedesAWaitingStart: a run's TaskFinished that arrives
// while its TaskStarted's write still waits for a group commit drops that
// write and records the start with the end: two rows for the run
// (DISPATCHED, SUCCEEDED), the start as the worker reported it.
func TestFinishSupersedesAWaitingStart(t *testing.T) {
	held := &heldStore{rows: map[string]int{}, hold: make(chan struct{}), entered: make(chan struct{}, 1)}
	h := startHarness(t, nil, func(st store.Store) store.Store {
		held.Store = st
		return store.NewBatcher(held, 0)
	}, nil)
	p := dial(t, h.m.Addr())
	p.hello("w1", 1, 0)
	other := h.submit(t, 0, "other")
	run := h.submit(t, 0, "short")
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex.TaskId != other.ID {
		other, run = run, other
	}
	// other ends first (one slot), so that a write of it can hold the
	// commit of the reports' lane below.
	p.send(&pb.TaskStarted{TaskId: other.ID, Attempt: 1, Fence: ex.Fence})
	p.send(&pb.TaskFinished{TaskId: other.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_EXITED})
	ex = p.expectEach(&pb.TaskFinishedAck{}, &pb.ExecuteTask{})[1].(*pb.ExecuteTask)
	if ex.TaskId != run.ID {
		t.Fatalf("ExecuteTask of %s, want %s", ex.TaskId, run.ID)
	}
	// Hold a batch, then report run's start and end behind it.
	held.mu.Lock()
	held.armed = true
	held.mu.Unlock()
	blocker := make(chan error, 1)
	go func() { // any write of another run: the committer is now held
		o := h.task(t, other.ID)
		blocker <- h.st.UpdateTask(context.Background(), &o, store.Expect{Fence: o.Fence, Status: o.Status})
	}()
	<-held.entered
	started := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	p.send(&pb.TaskStarted{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, StartedUnixMs: started.UnixMilli()})
	p.send(&pb.TaskFinished{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_EXITED})
	// other's end may have superseded its start too: wait for run's.
	superseded := `"task":"` + run.ID + `","message":"start superseded`
	testutil.WaitFor(t, 10*time.Second, "the end superseding the start", func() bool { return strings.Contains(h.logs.String(), superseded) })
	close(held.hold)
	p.expect(&pb.TaskFinishedAck{})
	if err := <-blocker; err != nil {
		t.Fatal(err)
	}
	got := h.task(t, run.ID)
	if got.Status != core.StatusSucceeded || got.StartedAt == nil || !got.StartedAt.Equal(started) {
		t.Fatalf("run: %s started %v, want SUCCEEDED started %v", got.Status, got.StartedAt, started)
	}
	held.mu.Lock()
	n := held.rows[run.ID]
	held.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d rows written for the run, want 2 (DISPATCHED, SUCCEEDED)", n)
	}
}
