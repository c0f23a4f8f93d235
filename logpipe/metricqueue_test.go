package logpipe

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/sqlite"
)

// gatedStore is a MetricStore whose AppendMetrics waits for release after
// telling in, then passes to next.
type gatedStore struct {
	next    MetricStore
	in      chan string
	release chan struct{}
}

func newGatedStore(next MetricStore) *gatedStore {
	return &gatedStore{next: next, in: make(chan string, 64), release: make(chan struct{})}
}

func (g *gatedStore) AppendMetrics(ctx context.Context, id string, pts []core.MetricPoint) error {
	g.in <- id
	select {
	case <-g.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.next.AppendMetrics(ctx, id, pts)
}

func (g *gatedStore) entered(t *testing.T) {
	t.Helper()
	select {
	case <-g.in:
	case <-time.After(10 * time.Second):
		t.Fatal("AppendMetrics never called")
	}
}

const twoPoints = "RLSCHED_METRIC {\"step\": 1, \"a\": 1, \"b\": 2}\n"

// TestWriter_AcksDoNotWaitForTheStore: while the store hangs in
// AppendMetrics, the bytes of later frames (with metric lines) are still
// written and acked; the points are stored once it answers.
func TestWriter_AcksDoNotWaitForTheStore(t *testing.T) {
	mem := &memStore{}
	g := newGatedStore(mem)
	a := newAcks()
	w := newWriter(t, WriterConfig{Store: g, Writers: 1})
	defer close(g.release) // before Close (cleanups run after defers)
	submit(t, w, Frame{TaskID: "m", Attempt: 1, Data: []byte(twoPoints), Ack: a})
	a.waitAck(t, "m", 0)
	g.entered(t) // the store now hangs
	line2 := "RLSCHED_METRIC {\"step\": 2, \"a\": 3}\n"
	submit(t, w, Frame{TaskID: "m", Attempt: 1, Offset: uint64(len(twoPoints)), Data: []byte(line2), Ack: a})
	if ack := a.waitAck(t, "m", 1); ack.Err != "" || ack.Offset != uint64(len(twoPoints)+len(line2)) {
		t.Fatalf("second ack while the store hangs: %+v", ack)
	}
	if st := w.Stats(); st["metric_queued"] != 3 {
		t.Fatalf("metric_queued = %v, want 3 (2 in flight, 1 waiting)", st["metric_queued"])
	}
}

// TestWriter_FullMetricQueueDropsAndCounts: past MetricQueuePoints the
// points offered are dropped and counted; those held are still stored.
func TestWriter_FullMetricQueueDropsAndCounts(t *testing.T) {
	mem := &memStore{}
	g := newGatedStore(mem)
	a := newAcks()
	w := newWriter(t, WriterConfig{Store: g, Writers: 1, MetricQueuePoints: 3})
	submit(t, w, Frame{TaskID: "m", Attempt: 1, Data: []byte(twoPoints), Ack: a})
	a.waitAck(t, "m", 0)
	g.entered(t)
	submit(t, w, Frame{TaskID: "m", Attempt: 1, Offset: uint64(len(twoPoints)),
		Data: []byte("RLSCHED_METRIC {\"step\": 2, \"a\": 3, \"b\": 4}\n"), Ack: a})
	if ack := a.waitAck(t, "m", 1); ack.Err != "" {
		t.Fatalf("a full metric queue must not refuse the bytes: %+v", ack)
	}
	if st := w.Stats(); st["metric_dropped"] != int64(2) || st["metric_queued"] != 2 {
		t.Fatalf("metric_dropped %v (want 2), metric_queued %v (want 2)", st["metric_dropped"], st["metric_queued"])
	}
	close(g.release)
	if err := w.WaitMetrics(t.Context(), "m"); err != nil {
		t.Fatal(err)
	}
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if len(mem.points["m"]) != 2 || mem.points["m"][0].Step != 1 {
		t.Fatalf("stored %v, want the 2 points of step 1", mem.points["m"])
	}
}

// TestWriter_WaitMetricsHoldsTheEnd: WaitMetrics returns only once the
// points a run's output carried were handed to the store, so the store's
// MetricsFirst writes the run's end after them and a client that sees it
// finished sees all its metrics.
func TestWriter_WaitMetricsHoldsTheEnd(t *testing.T) {
	ctx := context.Background()
	raw, err := sqlite.Open(filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	u := core.User{Username: "owner", PasswordHash: "x"}
	if err := raw.CreateUser(ctx, &u); err != nil {
		t.Fatal(err)
	}
	run := core.Task{UserID: u.ID, Command: []string{"true"}}
	if err := raw.CreateTask(ctx, &run); err != nil {
		t.Fatal(err)
	}
	g := newGatedStore(raw)
	a := newAcks()
	w := newWriter(t, WriterConfig{Store: g})
	st := store.MetricsFirst(raw, w)
	submit(t, w, Frame{TaskID: run.ID, Attempt: 1, Data: []byte(twoPoints), Ack: a})
	a.waitAck(t, run.ID, 0)
	g.entered(t)

	done := make(chan error, 1)
	go func() {
		end := run
		end.Status = core.StatusCancelled
		done <- st.UpdateTask(ctx, &end, store.Expect{Fence: 0, Status: core.StatusQueued})
	}()
	select {
	case err := <-done:
		t.Fatalf("the run's end was written before its metrics (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	series, err := raw.Metrics(ctx, run.ID, nil)
	if err != nil || len(series["a"]) != 1 || len(series["b"]) != 1 {
		t.Fatalf("metrics after the end: %v %v", series, err)
	}
}

// TestWriter_RunMetricCap: past MaxRunMetricPoints a run's points are
// dropped and counted; other runs are not affected.
func TestWriter_RunMetricCap(t *testing.T) {
	mem := &memStore{}
	a := newAcks()
	w := newWriter(t, WriterConfig{Store: mem, MaxRunMetricPoints: 3})
	out := twoPoints + "RLSCHED_METRIC {\"step\": 2, \"a\": 3, \"b\": 4}\nRLSCHED_METRIC {\"step\": 3, \"a\": 5}\n"
	for _, id := range []string{"capped", "other"} {
		data := out
		if id == "other" {
			data = twoPoints
		}
		submit(t, w, Frame{TaskID: id, Attempt: 1, Data: []byte(data), Ack: a})
		if ack := a.waitAck(t, id, 0); ack.Err != "" || ack.Offset != uint64(len(data)) {
			t.Fatalf("%s: %+v", id, ack)
		}
		if err := w.WaitMetrics(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if n, m := len(mem.points["capped"]), len(mem.points["other"]); n != 3 || m != 2 {
		t.Fatalf("stored %d points of the capped run (want 3) and %d of the other (want 2)", n, m)
	}
	if got := w.Stats()["metric_capped"]; got != int64(2) {
		t.Fatalf("metric_capped = %v, want 2", got)
	}
}
