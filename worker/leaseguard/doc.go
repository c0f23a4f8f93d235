// Package leaseguard enforces lease deadlines from outside the worker: a
// process of its own (the worker's binary run again with RLSCHED_GUARD=1,
// see MaybeServe) SIGKILLs a run's process group, and every process of its
// dynamic uid, once the run's lease deadline passed or the worker died,
// whether or not the worker is responsive (guard.go says how). Guard is
// the worker's side of it: the record of every run's group, deadline and
// uid, mirrored to the process over a pipe, and read by the worker's own
// self-fencing. Deadlines are on Now (CLOCK_BOOTTIME), which both
// processes share.
//
// What it must never do: kill a group before its deadline; kill the
// processes of a uid that is not a run's dynamic uid, or, once the worker
// died, of one another worker holds by then; block a caller (a guard
// process that stops reading is written to by a goroutine of its own);
// or inherit the worker's secrets. It knows nothing of runs, sessions or
// masters: package worker imports it, never the other way.
package leaseguard
