package logpipe

import (
	"context"
	"fmt"
	"hash/maphash"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
)

// Frame is one LogData frame handed to a Writer.
type Frame struct {
	TaskID  string
	TraceID string // written in the file's first line when the file is new
	Attempt int
	Offset  uint64 // offset of Data[0] in the attempt's output, from 0
	// Data belongs to the writer once submitted: the caller must not touch
	// it again. The writer never modifies it; it may hand it to the LogSink.
	Data []byte
	// Ack is told the outcome once the frame's bytes are in the file (or
	// why not); nil for none.
	Ack Acker
}

// Ack is the outcome of a run's frames: the file holds Offset bytes of the
// attempt's output, or Err says why the frames were not stored.
type Ack struct {
	TaskID  string
	Attempt int
	Offset  uint64
	Err     string // "", AckGap, AckBusy, or a storage error for the worker's log
	// FinalReward is set when these bytes changed the run's final reward
	// (the last FINAL_REWARD line, else the last episode_reward metric). The
	// acker records it (store.SetFinalReward) in order with the run's other
	// updates, before the ack reaches the worker; a frame without an Acker
	// gets no final reward.
	FinalReward *float64
}

// Errors of an Ack that the protocol names (docs/protocol.md).
const (
	// AckGap: the frame starts past Offset, the bytes the file holds; resend
	// from Offset.
	AckGap = "gap"
	// AckBusy: the writer's queue is full and the frame was not taken;
	// nothing of it is stored. Resend from the frame's offset after a pause.
	AckBusy = "busy"
)

// Acker receives Acks. LogAcked is called from writer goroutines; it must
// not block (gnet's AsyncWrite is fine).
type Acker interface {
	LogAcked(Ack)
}

// MetricStore is where the metric points extracted from the output go,
// batched per run and writer batch (store.Store is one).
type MetricStore interface {
	AppendMetrics(ctx context.Context, taskID string, pts []core.MetricPoint) error
}

// WriterConfig configures a Writer. Zero values get the defaults named.
type WriterConfig struct {
	// Dir is LOG_DIR, created if missing. Required.
	Dir string
	// Store receives metric points, through a queue of their own
	// (metricqueue.go); nil for none. Final rewards go out in the Acks.
	Store MetricStore
	// MetricQueuePoints bounds the metric points waiting for the store;
	// default 1 Mi (≈ 40 MiB). Past it new points are dropped and counted.
	MetricQueuePoints int
	// MaxRunLogBytes caps a run's log file (RUN_MAX_LOG_BYTES; default
	// DefaultMaxRunLogBytes, < 0: no cap). Output past it is acked but not
	// stored, and the file ends with one line saying so.
	MaxRunLogBytes int64
	// MaxRunMetricPoints caps the metric points stored per run
	// (RUN_MAX_METRIC_POINTS; default DefaultMaxRunMetricPoints, < 0: no
	// cap); past it points are dropped and counted (metric_capped). Counted
	// by the master writing the run's log, from when it last read the file.
	MaxRunMetricPoints int
	// Sink receives every byte appended to a log file; nil for none.
	Sink LogSink
	// Writers is the number of writer goroutines, each with its own queue and
	// its own runs (by task id hash); default min(4, GOMAXPROCS).
	Writers int
	// Queue is the queue before each writer: "ring" (the default, the
	// lock-free ring) or "chan" (a buffered channel, for benchmarks that
	// compare the two; RLSCHED_LOG_QUEUE).
	Queue string
	// QueueFrames bounds each writer's queue; default 16384 (a power of two):
	// a thousand workers with a few small frames each in flight must not
	// fill it before QueueBytes does.
	QueueFrames int
	// QueueBytes bounds the output bytes queued across all writers; default
	// 64 MiB. Past either bound Submit refuses (the caller answers "busy").
	QueueBytes int64
	// FlushBytes and FlushInterval end a batch: a writer takes frames until
	// its queue is empty, the batch holds FlushBytes (default 1 MiB), or its
	// first frame was taken FlushInterval ago (default 5 ms: a frame's wait
	// is bounded by time, not only by size; a backlog ends batches at
	// FlushBytes long before); then it writes.
	FlushBytes    int
	FlushInterval time.Duration
	// MaxOpenFiles bounds the log files open at once, across writers (least
	// recently used closed first); default 1024.
	MaxOpenFiles int
	// SharedDir says other processes (masters) may append to the files too
	// (writer_shared.go).
	SharedDir bool
	// Logger for write errors.
	Logger zerolog.Logger
}

func (c *WriterConfig) defaults() {
	if c.Writers <= 0 {
		c.Writers = min(4, runtime.GOMAXPROCS(0))
	}
	if c.QueueFrames <= 0 {
		c.QueueFrames = 16384
	}
	if c.QueueBytes <= 0 {
		c.QueueBytes = 64 << 20
	}
	if c.FlushBytes <= 0 {
		c.FlushBytes = 1 << 20
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = 5 * time.Millisecond
	}
	if c.MaxOpenFiles <= 0 {
		c.MaxOpenFiles = 1024
	}
	if c.MetricQueuePoints <= 0 {
		c.MetricQueuePoints = 1 << 20
	}
	if c.MaxRunLogBytes == 0 {
		c.MaxRunLogBytes = DefaultMaxRunLogBytes
	}
	if c.MaxRunMetricPoints == 0 {
		c.MaxRunMetricPoints = DefaultMaxRunMetricPoints
	}
}

// Defaults of the per-run caps (docs/decisions.md, issue 12).
const (
	DefaultMaxRunLogBytes     = 1 << 30
	DefaultMaxRunMetricPoints = 1_000_000
)

// Writer takes LogData frames from any goroutine without blocking (Submit)
// and appends them to the runs' log files from its own goroutines: frames of
// one run always go to the same writer, so they are written in the order
// they were submitted. Its exported methods are safe for concurrent use.
type Writer struct {
	cfg    WriterConfig
	log    zerolog.Logger
	seed   maphash.Seed
	shards []*writerShard
	wg     sync.WaitGroup

	closing    atomic.Bool
	submitting atomic.Int64 // Submits in progress, so Close waits for them
	closeOnce  sync.Once

	queued atomic.Int64 // bytes of Data in every shard's queue, bounded by cfg.QueueBytes

	frames, bytes, lines, dupBytes, gaps, busy, batches atomic.Int64
	writeErrors                                         atomic.Int64
	cappedRuns, cappedBytes, metricCapped               atomic.Int64 // per-run caps
	metrics                                             *metricQueue // nil without a Store

	senders atomic.Int64 // connections sending output (AddSender)
	conns   atomic.Int64 // connections that may send output (AddConn)

	errMu     sync.Mutex
	lastErr   string
	lastErrAt time.Time
	failing   atomic.Bool // the last write failed and none succeeded since
}

// NewWriter creates cfg.Dir and starts the writer goroutines.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("cannot start log writer: no log dir given (LOG_DIR)")
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create log dir %s: %w", cfg.Dir, err)
	}
	cfg.defaults()
	if _, err := newFrameQueue(cfg.Queue, 2); err != nil {
		return nil, fmt.Errorf("cannot start log writer: %w", err)
	}
	w := &Writer{cfg: cfg, log: cfg.Logger.With().Str("component", "logpipe").Logger(), seed: maphash.MakeSeed()}
	if cfg.Store != nil {
		w.metrics = newMetricQueue(cfg.Store, cfg.MetricQueuePoints, w.log)
	}
	perFiles := max(cfg.MaxOpenFiles/cfg.Writers, 1)
	// A shard may hold twice its share of the queue: runs hash to shards
	// unevenly, and the windows (credit.go) are shares of the whole queue,
	// so with an exact share a shard with more than its share of runs
	// refused "busy" while the queue as a whole had room.
	perBytes := min(max(2*cfg.QueueBytes/int64(cfg.Writers), 1), cfg.QueueBytes)
	for range cfg.Writers {
		q, _ := newFrameQueue(cfg.Queue, cfg.QueueFrames) // checked above
		s := &writerShard{
			w:         w,
			q:         q,
			maxQueued: perBytes,
			quit:      make(chan struct{}),
			files:     newFileSet(cfg.Dir, perFiles),
			groups:    map[string]int{},
		}
		s.files.gauge = &s.open
		w.shards = append(w.shards, s)
		w.wg.Go(s.run)
	}
	return w, nil
}

// WaitMetrics returns once the metric points of run id extracted so far
// were handed to the store (stored, or kept to retry after an error), or
// when ctx ends: store.MetricsFirst waits on it to record a run's end
// after its metrics.
// Safe from any goroutine; it waits for the store, so never call it from
// an event loop.
func (w *Writer) WaitMetrics(ctx context.Context, id string) error {
	if w.metrics == nil {
		return nil
	}
	return w.metrics.wait(ctx, id)
}

// QueueMetrics queues points of run id that came from elsewhere than its
// log (the TensorBoard scalars a worker reads), for the store, like the
// points of metric lines; dropped when the writer has no store or the
// queue is full. Safe from any goroutine, including a gnet event loop: it
// never blocks on the store.
func (w *Writer) QueueMetrics(id string, pts []core.MetricPoint) {
	if w.metrics != nil {
		w.metrics.add(id, pts)
	}
}

// Dir is the directory holding the log files.
func (w *Writer) Dir() string { return w.cfg.Dir }

func (w *Writer) shardFor(taskID string) *writerShard {
	return w.shards[maphash.String(w.seed, taskID)%uint64(len(w.shards))]
}

// Submit queues f for writing and reports true, or reports false at once
// when the queue is full (or the writer closed): then nothing of f is kept
// and f.Ack is not called; the caller answers the frame with AckBusy itself.
// Safe from any goroutine, including a gnet event loop: it never blocks and
// does no I/O.
func (w *Writer) Submit(f Frame) bool {
	w.submitting.Add(1)
	ok := !w.closing.Load() && w.shardFor(f.TaskID).push(frameItem{Frame: f})
	w.submitting.Add(-1)
	if !ok {
		w.busy.Add(1)
	}
	return ok
}

// Forget closes the run's file and drops what the writer keeps about it
// (metric extraction state), after the frames already queued for it. For
// runs that ended. Best effort: a full queue skips it (the file is closed
// when it falls out of the open-file cache). Safe from any goroutine.
func (w *Writer) Forget(taskID string) {
	w.submitting.Add(1)
	if !w.closing.Load() {
		w.shardFor(taskID).push(frameItem{Frame: Frame{TaskID: taskID}, forget: true})
	}
	w.submitting.Add(-1)
}

// Close stops taking frames, writes (and acks) those queued, closes the
// files and returns. Safe from any goroutine, any number of times.
func (w *Writer) Close() {
	w.closeOnce.Do(func() {
		w.closing.Store(true)
		for w.submitting.Load() > 0 {
			runtime.Gosched() // a Submit is between its check and its push
		}
		for _, s := range w.shards {
			close(s.quit)
		}
		w.wg.Wait()
		if w.metrics != nil {
			w.metrics.close() // after the writers: their last points are queued
		}
	})
}

// Stats is the writer's health for /api/monitor/health: counters since
// start, the queue now, and the last error. Safe from any goroutine.
func (w *Writer) Stats() map[string]any {
	var depth, queued, capacity, open int64
	for _, s := range w.shards {
		depth += int64(s.q.depth())
		queued += s.queued.Load()
		capacity += int64(s.q.capacity())
		open += s.open.Load()
	}
	var metricsHeld, retrying int
	var metricErrors, metricDropped int64
	if w.metrics != nil {
		metricsHeld, retrying = w.metrics.stats()
		metricErrors, metricDropped = w.metrics.errors.Load(), w.metrics.dropped.Load()
	}
	w.errMu.Lock()
	status, lastErr, lastAt := "ok", w.lastErr, ""
	if w.failing.Load() {
		status = "failing"
	}
	if !w.lastErrAt.IsZero() {
		lastAt = w.lastErrAt.UTC().Format(time.RFC3339Nano)
	}
	w.errMu.Unlock()
	return map[string]any{
		"status":          status,
		"writers":         len(w.shards),
		"frames":          w.frames.Load(),
		"bytes":           w.bytes.Load(),
		"lines":           w.lines.Load(),
		"duplicate_bytes": w.dupBytes.Load(),
		"gaps":            w.gaps.Load(),
		"busy":            w.busy.Load(),
		"batches":         w.batches.Load(),
		"errors":          w.writeErrors.Load(),
		"metric_errors":   metricErrors,
		"metric_queued":   metricsHeld,
		"metric_retrying": retrying,
		"metric_dropped":  metricDropped,
		"metric_capped":   w.metricCapped.Load(),
		"capped_runs":     w.cappedRuns.Load(),
		"capped_bytes":    w.cappedBytes.Load(),
		"last_error":      lastErr,
		"last_error_at":   lastAt,
		"queue_depth":     depth,
		"queue_bytes":     queued,
		"queue_capacity":  capacity,
		"open_files":      open,
	}
}

// failed records a storage error for Stats.
func (w *Writer) failed(err error) {
	w.writeErrors.Add(1)
	w.errMu.Lock()
	// Stats is shown on the public health page: the error says what failed,
	// not where LOG_DIR is on the master's disk (the master's own log has it).
	msg := err.Error()
	if w.cfg.Dir != "" {
		msg = strings.ReplaceAll(msg, w.cfg.Dir, "LOG_DIR")
	}
	w.lastErr, w.lastErrAt = msg, time.Now()
	w.errMu.Unlock()
	w.failing.Store(true)
}

// wrote clears the failing status after a successful write.
func (w *Writer) wrote() {
	if w.failing.Load() {
		w.failing.Store(false)
	}
}
