// Package outputs carries a run's output dir (RLSCHED_OUTPUT_DIR) between
// the worker and the master: the upload of its files as ArtifactChunks
// (outputs.go), started by the run closing a file it wrote (watch.go),
// read through Dir (outdir.go); the restore of a resumed
// attempt's files before its process starts (restore.go); and the scalars
// of its TensorBoard event files as Metric frames (tensorboard.go, with
// package tfevents). Files is one run's; Link is what the runs of a worker
// share: the lock of their state, and the connection's side of them
// (joined or not, which session, the artifact window).
//
// What it must never do: follow a symbolic link or open anything outside a
// run's dir, or read a file the run could not have given it (a hard link,
// another uid's file: Dir.open's check); read more than a few chunks ahead of the writer; let a run's
// TaskFinished go before its last sync (Files.Done); take the room of logs
// (the writer collects chunks after every run's logs, in a window of their
// own); or take a lock of the worker's or block its writer (Link wakes it
// through a kick that takes no lock). It knows nothing of sessions or the
// run table: package worker imports it, never the other way.
package outputs
