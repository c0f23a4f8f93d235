package dispatch

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
	"github.com/rlsched/rlsched/store"
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

// countingQueue counts reads of the queue.
type countingQueue struct {
	store.Store
	reads int
}

func (c *countingQueue) QueuedTasks(ctx context.Context, limit int) ([]core.Task, error) {
	c.reads++
	return c.Store.QueuedTasks(ctx, limit)
}

// The page of the queue serves the passes after it until the queue may
// have changed (Notify), half of it was placed, or pageTTL passed; the
// runs placed or found gone leave it.
func TestQueuePageServesPassesUntilTheQueueChanges(t *testing.T) {
	h := newHarness(t, nil)
	for range 4 {
		h.submit(t, 0, "x")
	}
	st := &countingQueue{Store: h.st}
	sc := &scheduler{}
	now := time.Now()
	page := func(at time.Time) []core.Task {
		t.Helper()
		runs, read, err := sc.queue.page(t.Context(), st, at)
		if err != nil || read != 4 {
			t.Fatalf("page: %d read, %v", read, err)
		}
		return runs
	}
	first := slices.Clone(page(now)) // the page is the scheduler's: taken changes it in place
	page(now.Add(time.Millisecond))
	if st.reads != 1 {
		t.Fatalf("%d reads for two passes, want 1", st.reads)
	}
	sc.queue.taken(map[string]bool{first[0].ID: true})
	if got := page(now); len(got) != 3 || got[0].ID != first[1].ID || st.reads != 1 {
		t.Fatalf("after one placed: %d runs, %d reads", len(got), st.reads)
	}
	sc.notify()
	if got := page(now); len(got) != 4 || st.reads != 2 {
		t.Fatalf("after Notify: %d runs, %d reads; want 4 and 2", len(got), st.reads)
	}
	page(now.Add(pageTTL))
	if st.reads != 3 {
		t.Fatalf("after pageTTL: %d reads, want 3", st.reads)
	}
	// A page shorter than plan.Batch held the whole queue: it serves with
	// any number of its runs gone.
	sc.queue.taken(map[string]bool{first[0].ID: true, first[1].ID: false, first[2].ID: true})
	if got := page(now.Add(pageTTL)); len(got) != 1 || st.reads != 3 {
		t.Fatalf("with three of four gone: %d runs, %d reads; want 1 and 3", len(got), st.reads)
	}

	// Runs this master created join the page at their place, without a
	// read; one already placed does not come back.
	urgent := h.submit(t, 0, "urgent")
	urgent.Priority = 5
	sc.queued(urgent)
	placed := h.submit(t, 0, "placed")
	sc.queue.taken(map[string]bool{placed.ID: true})
	sc.queued(placed)
	got := page(now.Add(pageTTL))
	if st.reads != 3 || len(got) != 2 || got[0].ID != urgent.ID {
		t.Fatalf("after Queued: %d runs, the first %s, %d reads; want 2, %s, 3 reads", len(got), got[0].ID, st.reads, urgent.ID)
	}
	for _, r := range got {
		if r.ID == placed.ID {
			t.Fatal("a run placed before its Queued came back")
		}
	}
}

// A run created after a full page was read joins it only if it comes
// before the page's last run: the queue holds runs after that one that the
// page lacks.
func TestQueuePageFullKeepsItsRange(t *testing.T) {
	var q queuePage
	base := time.Now()
	q.valid, q.read, q.gone = true, plan.Batch, map[string]bool{}
	for i := range plan.Batch {
		q.runs = append(q.runs, core.Task{ID: fmt.Sprintf("r%03d", i), CreatedAt: base.Add(time.Duration(i))})
	}
	q.last = q.runs[len(q.runs)-1]
	q.merge(core.Task{ID: "late", CreatedAt: base.Add(time.Hour)})
	q.merge(core.Task{ID: "high", Priority: 1, CreatedAt: base.Add(time.Hour)})
	if len(q.runs) != plan.Batch+1 || q.runs[0].ID != "high" {
		t.Fatalf("%d runs, the first %s; want %d, high", len(q.runs), q.runs[0].ID, plan.Batch+1)
	}
	// Half of a full page placed: read again (the queue's next runs).
	st := &countingQueue{Store: newHarness(t, nil).st}
	q.at = base
	gone := map[string]bool{}
	for _, r := range q.runs[:plan.Batch/2+2] {
		gone[r.ID] = true
	}
	q.taken(gone)
	if _, _, err := q.page(t.Context(), st, base); err != nil || st.reads != 1 {
		t.Fatalf("a full page half placed: %d reads (%v), want 1", st.reads, err)
	}
}

// Runs added while no pass takes them (nothing free) are held up to
// plan.Batch; past that the page reads the queue again, which has them.
func TestQueuePageInboxBounded(t *testing.T) {
	h := newHarness(t, nil)
	st := &countingQueue{Store: h.st}
	sc := &scheduler{}
	now := time.Now()
	if _, _, err := sc.queue.page(t.Context(), st, now); err != nil || st.reads != 1 {
		t.Fatalf("first page: %d reads, %v", st.reads, err)
	}
	var ids []string
	for range plan.Batch + 1 {
		r := h.submit(t, 0, "x")
		sc.queued(r)
		ids = append(ids, r.ID)
	}
	if n := len(sc.queue.inbox); n > plan.Batch {
		t.Fatalf("the inbox holds %d runs, want at most %d", n, plan.Batch)
	}
	runs, read, err := sc.queue.page(t.Context(), st, now)
	if err != nil || st.reads != 2 || read != plan.Batch {
		t.Fatalf("after an overflow: %d reads, %d read, %v; want 2 reads of a full page", st.reads, read, err)
	}
	if runs[0].ID != ids[0] || runs[len(runs)-1].ID != ids[plan.Batch-1] {
		t.Fatalf("the page runs %s..%s, want %s..%s", runs[0].ID, runs[len(runs)-1].ID, ids[0], ids[plan.Batch-1])
	}
}

// taken keeps the page's order and drops exactly the runs named, wherever
// they are, and ids the page lacks change nothing.
func TestQueuePageTaken(t *testing.T) {
	for _, tc := range []struct {
		drop []string
		want string
	}{{[]string{"a"}, "bcde"}, {[]string{"a", "c"}, "bde"}, {[]string{"e"}, "abcd"}, {[]string{"b", "d", "zz"}, "ace"},
		{[]string{"zz"}, "abcde"}, {[]string{"a", "b", "c", "d", "e"}, ""}} {
		q := queuePage{valid: true, gone: map[string]bool{}}
		for _, id := range []string{"a", "b", "c", "d", "e"} {
			q.runs = append(q.runs, core.Task{ID: id})
		}
		ids := map[string]bool{}
		for _, id := range tc.drop {
			ids[id] = true
		}
		q.taken(ids)
		got := ""
		for _, r := range q.runs {
			got += r.ID
		}
		if got != tc.want || !q.gone[tc.drop[0]] {
			t.Errorf("dropping %v: %q (gone %v), want %q", tc.drop, got, q.gone, tc.want)
		}
	}
}
