// Package logpipe is the log pipe of the master: it turns the output bytes
// of runs, as LogData frames from the event loops, into one log file per run
// (LOG_DIR/<taskId>.log, first line TRACE_ID:<traceId>, attempts after the
// first each preceded by one marker line) and the metric points printed in
// them, and acks each frame once its bytes are in the file.
//
// What it must never do: block an event loop (Submit refuses instead of
// waiting), buffer without bound (each ring is bounded in frames and in
// bytes, the metric queue in points), ack bytes that are not in the file
// (past a run's cap: that are not meant to be), write a byte twice, make
// an ack wait for the store, or wrap the store (its decorators live in
// package store, which declares what it needs of the pipe).
//
// Offsets make delivery exactly-once into the file: each attempt's output is
// addressed by byte offset from 0; bytes the file already has are dropped and
// an offset past the end is refused (ErrGap), never padded.
//
// # The path of a frame
//
// A gnet event loop decodes a LogData frame, checks its fence (package
// dispatch) and calls Writer.Submit, which pushes it into the ring of the
// writer goroutine its run hashes to and returns: no lock, no I/O, no
// allocation. The writer takes a batch (until its ring is empty, the batch
// holds FlushBytes, or FlushInterval passed since it took the first), groups it by run keeping each
// run's order, appends each run's new bytes with one write, hands them to the
// LogSink (the live hub) at their file offset, feeds them to the run's
// metric extractor, queues the points it finds for the store, and only then
// acks the offset to the worker. Files stay open in a bounded LRU cache per
// writer.
//
// # Metric points
//
// A metric line is `RLSCHED_METRIC {json}` or `FINAL_REWARD:x` at the start
// of a line (metrics.go). The final reward travels in the Ack (the acker
// records it in order with the run's other updates); the points go to the
// MetricStore through a queue of their own with one goroutine
// (metricqueue.go), so a slow or unavailable store never holds up a writer
// or an ack. A full queue drops the points offered and counts them; points
// the store refuses are retried with backoff. Because the bytes are acked
// before their points are stored, Writer.WaitMetrics tells when a run's
// points so far were handed to the store; the store's MetricsFirst waits on
// it so that a run's end is written after its points.
//
// # Per-run caps
//
// A run's log file holds at most WriterConfig.MaxRunLogBytes
// (RUN_MAX_LOG_BYTES): the output that would pass it is cut there, one line
// saying the cap was reached is written, and later output of the run (later
// attempts too) is acked but not stored, though still scanned for metrics. A
// run stores at most MaxRunMetricPoints (RUN_MAX_METRIC_POINTS) metric
// points; later ones are dropped and counted (Stats: capped_bytes,
// metric_capped).
//
// # Back-pressure
//
// The master holds at most WriterConfig.QueueBytes of output. A worker has a
// window of unacked bytes per connection, so a slow disk slows the acks and
// with them the senders. The window is computed here, on the master, and
// only here (credit.go): HelloAck and every LogAck carry log_window
// (Writer.LogWindow), the queue's bytes shared by the connections sending
// output, so that however many workers stream they cannot together have
// much more in flight than the queue takes; the worker obeys it, clamped
// only by its own upper bound. The bound is on all the writers' queues
// together; each one's own is twice its share, as runs hash to writers
// unevenly (with an exact share, the fuller writers refused "busy" while
// the queue had room, and each refusal paused a run 20 ms to 1 s: the tail
// of the logs benchmark's paced phase). When a ring is full anyway, Submit reports
// false and the event loop answers the frame at once with LogAck{offset: the
// frame's offset, error: "busy"}: nothing of the frame was kept; the worker
// pauses that run's output (with a short jittered backoff) and resends from
// there. Frames it sent behind the refused one are dropped unanswered until
// the resend (package dispatch, logpipe_flow.go), since the worker rewound
// past them. A write that fails (disk full, LOG_DIR unwritable) acks the
// run's frames with the error; the worker keeps the bytes in its spool and
// retries with backoff, and Writer.Stats reports the failure until a write
// succeeds again.
//
// # The ring
//
// Ring is Dmitry Vyukov's bounded MPMC queue ("Bounded MPMC queue",
// 1024cores.net): an array of 2^k cells, each with a sequence number, and two
// counters, tail for producers and head for consumers, on separate cache
// lines. Cell i starts with seq = i. A producer reads tail = pos and the seq
// of cell pos mod 2^k: seq == pos means the cell is free for pos, and the
// producer claims pos by CAS of tail from pos to pos+1, writes the value,
// then stores seq = pos+1. seq < pos means the cell still holds the value
// pushed one lap earlier: the ring is full and TryPush fails at once. A
// consumer does the mirror image with head: seq == pos+1 means the value of
// pos is there; it claims pos by CAS of head, reads the value, clears the
// cell and stores seq = pos + 2^k, freeing the cell for the producer one lap
// later.
//
// Memory ordering: Go's sync/atomic operations are sequentially consistent,
// so each Store of seq is a release and each Load of seq an acquire. The
// producer's plain write of the value happens before its Store(seq = pos+1),
// which the consumer's Load observes before it reads the value: the read
// sees the write. Symmetrically the consumer's read (and clearing) happens
// before its Store(seq = pos + 2^k), which the next producer of that cell
// must observe before it writes: the write never overtakes the read. The CAS
// on tail (head) gives each position to exactly one producer (consumer), so
// no two goroutines ever touch a cell's value at once; positions are 64-bit
// and never wrap in practice. The race detector models these atomics the
// same way, which the -race tests rely on.
//
// TryPopBatch takes up to max values with one CAS: it reads head = pos,
// then the seq of cells pos, pos+1, ... while seq == (that position)+1 (each
// Load an acquire of the value its producer published), and claims the n
// positions found by CAS of head from pos to pos+n. The CAS succeeds only if
// no other consumer advanced head meanwhile, so the n cells are this
// consumer's alone; no producer can write them before the consumer's
// Store(seq = position + 2^k) of each, which follows its read of the value:
// the argument above holds cell by cell. The writer, the ring's only
// consumer, takes 32 at a time, paying for the shared head once per 32
// frames instead of once per frame.
//
// Progress: TryPush and TryPop never wait for a lock, but a producer stopped
// between its CAS and its Store delays the consumers of later positions
// (TryPop reports empty, Ready false, until it publishes), as in Vyukov's
// original; the writer goroutine then sleeps until it does (below).
//
// Benchmarks: ring_bench_test.go against a mutex-guarded slice drained by
// swapping, padded mutex shards and a buffered channel, one consumer
// spinning when empty; writer_bench_test.go through the whole writer with
// either queue; and the `logs` scenario of bench/, which runs a master with
// each queue side by side in one run (-logs-queue; bench/changes.md has the
// figures). In isolation the channel, which parks its consumer, beats a
// spinning ring on two cores. In the writer the ring wins once its consumer
// never spins: it takes 32 frames per CAS and sleeps until the oldest push
// is published (below), where a channel takes its lock for every send and
// every receive. The channel is kept as the writer's alternative queue
// (WriterConfig.Queue "chan") so that every measurement can show both.
//
// # Waking the writer
//
// A writer goroutine with nothing ready sets its sleeping flag, checks once
// more whether the oldest push is published (Ring.Ready: claimed is not
// enough), and waits on a channel of capacity 1; a producer that sees the
// flag after publishing its push sends on the channel without blocking.
// With sequentially consistent atomics either the writer's second check
// sees the publication or the producer sees the flag, so a frame never
// waits for a wake-up that does not come. A producer stopped between its
// claim and its publication (preempted, its event loop's thread
// descheduled) therefore costs the writer a sleep, not a spin on the
// processor the producer needs; the frames behind it wait for it, as in
// any FIFO.
package logpipe
