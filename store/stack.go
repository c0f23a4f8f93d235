package store

import (
	"time"

	"github.com/rlsched/rlsched/core"
)

// StackOptions is what the master's decorators need beside the backend.
type StackOptions struct {
	// Observer hears of every write the backend commits (Observed).
	Observer Observer
	// HalfLife is the decay of the fair-share usage a run's end charges
	// (Accruing).
	HalfLife time.Duration
	// Points builds, on the store it is given, what hands the metric
	// points of runs' output to it (the log pipe's writer): a run's end
	// is written after them (MetricsFirst). An error is Stack's.
	Points func(Store) (MetricsWaiter, error)
	// Sink hears every committed run change (Publishing).
	Sink core.EventSink
}

// Stack wraps the backend raw in the master's decorators, in the one order
// they work in, and returns what every room of the master writes through.
// It is the only place that order is declared (docs/architecture.md, "The
// store's decorators, innermost first").
func Stack(raw Store, o StackOptions) (Store, error) {
	// Observed sits on the backend itself: there each call is one
	// transaction, so a commit is counted once with its rows, and each
	// run's change once however the layers above split or merge writes.
	st := Observed(raw, o.Observer)
	// The Batcher group-commits the single-row writes of everything above
	// it (REST submissions, the dispatcher's transitions and the charges
	// Accruing puts on them): one durable commit for the writes that wait
	// at the same time.
	st = NewBatcher(st, 0)
	// PackingAtEnd sees the points the log pipe writes (built on it, below)
	// and the ends from above, committed, and packs an ended run's series
	// off the end's path, through the Batcher like any other write.
	st = PackingAtEnd(st)
	// The log pipe is built here, on the layers below the one that waits
	// for it (MetricsFirst): no layer above does anything with metric
	// points, and the Batcher passes them on to the backend.
	w, err := o.Points(st)
	if err != nil {
		return nil, err
	}
	// Accruing is above the Batcher, so a run's charge rides its end into
	// that update's transaction, and a group commit of many ends costs
	// one commit with their charges.
	st = Accruing(st, o.HalfLife)
	// MetricsFirst is above the Batcher too: a run's end waits for its
	// metric points before it joins a batch, never inside one, where it
	// would hold up every other row of the commit.
	st = MetricsFirst(st, w)
	// Publishing is outermost, so every change committed below it, by any
	// layer, reaches the sink, in commit order per run.
	return Publishing(st, o.Sink), nil
}
