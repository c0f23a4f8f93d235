// Package worker is the agent that runs on each GPU machine: it joins a
// master (docs/protocol.md), starts the runs it is given as process groups,
// streams their output with byte offsets, and reports how they ended.
// Start builds one from a Config; Close stops it.
//
// What it must never do: start a run through a shell, lose or reorder output
// bytes, block a run's output on a dead connection (bytes wait in the run's
// spool instead, and a full spool blocks the run, never drops), or leave a
// process behind when a run ends, when its lease is lost, or when the
// worker itself dies (the guard process, worker/leaseguard, kills what is
// left), or let a run execute past its lease deadline (the guard kills it
// even when the worker is frozen; docs/reliability.md), nor give one uid to
// two live runs or a run any secret of rlsched (worker/isolation).
//
// Beside it, each in a package of its own that never imports this one:
// worker/leaseguard (the guard process), worker/isolation (whose uid a run
// gets), worker/outputs (a run's output dir: upload, restore, TensorBoard),
// worker/spool, worker/nvsmi, worker/tfevents.
//
// Goroutines: one reader and one writer per connection, a heartbeat ticker
// per connection, a self-fencing ticker, the writer of the guard's pipe,
// and per run an output pump, a reaper, and its outputs' uploader and
// TensorBoard reader. All run state is the run table's (table.go), whose
// mutex no other file takes; the outputs of the runs share a lock of their
// own (outputs.Link), taken after the table's. The writer is the only
// goroutine that touches the connection for writing, and nothing a run
// does waits for it.
package worker
