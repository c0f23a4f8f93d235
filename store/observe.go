package store

import (
	"context"
	"time"

	"github.com/rlsched/rlsched/core"
)

// Observer is told what a store committed: how long each write took and
// how many rows it carried, the runs created, and each change of a run's
// status. Its methods are called on the writers' goroutines after each
// write, so they must be quick and must not block (an atomic add).
type Observer interface {
	// StoreCommit is one write of the backend (a transaction) of rows
	// rows, or 0 for a write of one row that is not a batch.
	StoreCommit(d time.Duration, rows int)
	// RunsCreated counts runs written new.
	RunsCreated(n int)
	// RunMoved is a run's status written from from to to; queued is how
	// long it had waited QUEUED when to is DISPATCHED (since its creation
	// or requeue: the time of its last write before this one).
	RunMoved(from, to core.Status, queued time.Duration)
}

// Observed wraps the backend st so that o hears of every write it
// commits. Put it innermost, right on the backend, so that each call it
// sees is one transaction (the Batcher's group commits included) and each
// run's change is seen once, whoever made it. When st is a TaskWriter, so
// is the result. Safe for concurrent use, as st is.
func Observed(st Store, o Observer) Store {
	ob := &observed{Store: st, o: o}
	if tw, ok := st.(TaskWriter); ok {
		return &observedWriter{ob, tw}
	}
	return ob
}

type observed struct {
	Store
	o Observer
}

func (s *observed) CreateTask(ctx context.Context, t *core.Task) error {
	start := time.Now()
	err := s.Store.CreateTask(ctx, t)
	s.o.StoreCommit(time.Since(start), 0)
	if err == nil {
		s.o.RunsCreated(1)
	}
	return err
}

func (s *observed) CreateTasks(ctx context.Context, ts []*core.Task) []error {
	start := time.Now()
	errs := s.Store.CreateTasks(ctx, ts)
	s.o.StoreCommit(time.Since(start), len(ts))
	s.created(errs)
	return errs
}

func (s *observed) UpdateTask(ctx context.Context, t *core.Task, exp Expect) error {
	before := t.UpdatedAt
	start := time.Now()
	err := s.Store.UpdateTask(ctx, t, exp)
	s.o.StoreCommit(time.Since(start), 0)
	if err == nil {
		s.moved(exp.Status, t, before)
	}
	return err
}

func (s *observed) UpdateTasks(ctx context.Context, us []Update) []error {
	before := updatedAts(us)
	start := time.Now()
	errs := s.Store.UpdateTasks(ctx, us)
	s.o.StoreCommit(time.Since(start), len(us))
	s.updated(us, errs, before)
	return errs
}

func (s *observed) AppendMetrics(ctx context.Context, taskID string, pts []core.MetricPoint) error {
	start := time.Now()
	err := s.Store.AppendMetrics(ctx, taskID, pts)
	s.o.StoreCommit(time.Since(start), len(pts))
	return err
}

func (s *observed) created(errs []error) {
	n := 0
	for _, err := range errs {
		if err == nil {
			n++
		}
	}
	if n > 0 {
		s.o.RunsCreated(n)
	}
}

func (s *observed) updated(us []Update, errs []error, before []time.Time) {
	for i, err := range errs {
		if err == nil {
			s.moved(us[i].Expect.Status, us[i].Task, before[i])
		}
	}
}

// moved reports t's write from status from, when its status changed.
func (s *observed) moved(from core.Status, t *core.Task, before time.Time) {
	if t.Status == from {
		return
	}
	var queued time.Duration
	if from == core.StatusQueued && !before.IsZero() {
		queued = max(t.UpdatedAt.Sub(before), 0)
	}
	s.o.RunMoved(from, t.Status, queued)
}

func updatedAts(us []Update) []time.Time {
	out := make([]time.Time, len(us))
	for i, u := range us {
		out[i] = u.Task.UpdatedAt
	}
	return out
}

// observedWriter is observed over a TaskWriter backend.
type observedWriter struct {
	*observed
	tw TaskWriter
}

func (s *observedWriter) WriteTasks(ctx context.Context, creates []*core.Task, updates []Update) (cerrs, uerrs []error) {
	before := updatedAts(updates)
	start := time.Now()
	cerrs, uerrs = s.tw.WriteTasks(ctx, creates, updates)
	s.o.StoreCommit(time.Since(start), len(creates)+len(updates))
	s.created(cerrs)
	s.updated(updates, uerrs, before)
	return cerrs, uerrs
}
