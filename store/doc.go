// Package store is rlsched's durable truth: users, runs and their metrics,
// sweeps, the artifact index, fair-share usage and quotas. Every state
// change of a run is a compare-and-swap on (fence, status), so a writer that
// lost ownership changes nothing and learns it (core.ErrFenced).
//
// The room holds:
//
//   - the interface, Store (store.go, with Scheduling and the sweeps' types
//     beside it), which every backend implements whole;
//   - the decorators any backend can wear, here innermost first as Stack
//     stacks them for the master (the one place their order is written):
//     Observed (each committed write to the metrics), Batcher (group
//     commit), Accruing (a run's end charges its owner's usage in the same
//     commit), MetricsFirst (a run's end waits for its metric points) and
//     Publishing (every committed run change to the event sink, outermost);
//   - the backends: sqlite (the default, pure Go, for one master) and mysql
//     (for several), which share their encoding and SQL in internal/sqlutil;
//   - storetest, the conformance suite every backend must pass (Publishing
//     runs it too, over sqlite).
//
// What it must never do: import a room above it (the log pipe, the
// dispatcher, REST: what it needs of them it declares, as MetricsWaiter, or
// takes from core, as core.EventSink); change a run but by the fenced
// compare-and-swap; publish a write that did not commit; hold a
// transaction open across anything but the database.
package store
