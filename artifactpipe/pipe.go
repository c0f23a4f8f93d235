package artifactpipe

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/core"
)

// Chunk is an ArtifactChunk as the pipe takes it, its fence and path
// already checked by the caller.
type Chunk struct {
	TaskID  string
	Attempt int
	Path    string
	// Size and ModNs are the version: the file's size and mtime when the
	// worker began reading it.
	Size, ModNs int64
	Offset      uint64
	Data        []byte
	Last        bool
	Changing    bool // the last chunk of a file that kept changing at the run's end
	// Ack receives the chunk's answer (and every later one of its upload,
	// until a chunk from another connection names another).
	Ack Acker
}

// Ack answers a chunk. Err is one of the Err* codes, or "refused: why"
// (never resend this version) or "failed: why" (try again later).
type Ack struct {
	TaskID      string
	Attempt     int
	Path        string
	Size, ModNs int64
	Offset      uint64 // bytes of the version durable here
	Done        bool   // the file is stored and indexed
	Err         string
}

// Short answers of Ack.Err.
const (
	ErrBusy = "busy" // the queue was full: nothing of the chunk was taken; resend from its offset
	ErrGap  = "gap"  // the chunk starts past Offset: resend from Offset
)

// Acker receives the answers of a connection's chunks. ArtifactAcked is
// called from writer goroutines and must not block.
type Acker interface{ ArtifactAcked(Ack) }

// Index is what the pipe needs of the store.
type Index interface {
	PutArtifact(ctx context.Context, a core.Artifact) error
	Artifacts(ctx context.Context, taskID string, attempt int) ([]core.Artifact, error)
	ArtifactUsage(ctx context.Context, taskID string) (files int, bytes int64, err error)
	ArtifactBytes(ctx context.Context, userID int64) (int64, error)
	Task(ctx context.Context, id string) (core.Task, error)
	AddWarning(ctx context.Context, id string, w core.Warning) error
}

// Stager is a blob store that takes files written in its own staging
// directory (artifact/disk): uploads to it survive a reconnect and a
// master failover.
type Stager interface {
	StageDir() string
	Adopt(ctx context.Context, f *os.File, b artifact.Blob) error
}

// Config of a Pipe. Zero values get the defaults named.
type Config struct {
	Blobs artifact.Store // required
	Index Index          // required
	// Writers is the number of writer goroutines (default 4); a run's
	// uploads all go to one.
	Writers int
	// QueueBytes bounds the chunk bytes waiting for the writers (default
	// 256 MiB); the windows share it.
	QueueBytes int64
	// MaxFileBytes (ARTIFACT_MAX_FILE_BYTES, default 4 GiB), MaxRunBytes
	// (ARTIFACT_MAX_RUN_BYTES, default 10 GiB) and MaxRunFiles (default
	// 10,000) bound what a run keeps; < 0: no bound.
	MaxFileBytes, MaxRunBytes int64
	MaxRunFiles               int
	// MaxUserBytes (ARTIFACT_MAX_MB_PER_USER) bounds what the runs of one
	// user keep, all together, and MaxTotalBytes (ARTIFACT_MAX_MB) what
	// every run keeps; 0: no bound. Both count the rows' sizes (a file
	// two runs keep counts twice, though its blob is stored once).
	MaxUserBytes, MaxTotalBytes int64
	// MaxStreams bounds the uploads streaming into a store that does not
	// stage (each holds one multipart part); past it a new one is "busy".
	// Default 16.
	MaxStreams int
	// IdleUpload: an upload without a chunk this long is given up and its
	// staging file removed. Default 10 min.
	IdleUpload time.Duration
	Clock      func() time.Time // default time.Now
	Logger     zerolog.Logger
}

// Defaults of Config.
const (
	DefaultMaxFileBytes = 4 << 30
	DefaultMaxRunBytes  = 10 << 30
	DefaultMaxRunFiles  = 10_000
	// DefaultMaxUserMB is ARTIFACT_MAX_MB_PER_USER's default, 1 TiB: far
	// above a lab's usual runs, yet a bound a runaway loop meets.
	DefaultMaxUserMB = 1 << 20
)

// Windows a connection is granted (ArtifactAck.window): the queue shared by
// the connections sending outputs, between one chunk and 16 MiB.
const (
	MinWindow = 1 << 20
	MaxWindow = 16 << 20
	// MaxChunk is the largest chunk a worker sends.
	MaxChunk = 1 << 20
)

func (c *Config) defaults() error {
	if c.Blobs == nil || c.Index == nil {
		return errors.New("BUG: the artifact receiver needs a blob store and an index")
	}
	if c.Writers <= 0 {
		c.Writers = 4
	}
	if c.QueueBytes <= 0 {
		c.QueueBytes = 256 << 20
	}
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = DefaultMaxFileBytes
	}
	if c.MaxRunBytes == 0 {
		c.MaxRunBytes = DefaultMaxRunBytes
	}
	if c.MaxRunFiles == 0 {
		c.MaxRunFiles = DefaultMaxRunFiles
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = 16
	}
	if c.IdleUpload <= 0 {
		c.IdleUpload = 10 * time.Minute
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return nil
}

// Pipe is the receiver. Its exported methods are safe for concurrent use;
// Submit, Detach, Forget and Window never block.
type Pipe struct {
	cfg     Config
	log     zerolog.Logger
	stager  Stager // nil: the store does not stage
	shards  []*shard
	seed    maphash.Seed
	queued  atomic.Int64 // chunk bytes in the shards' channels
	senders atomic.Int64
	streams atomic.Int64 // stream sinks open
	closing atomic.Bool
	busy    atomic.Int64

	stored, storedBytes, refused, failed atomic.Int64

	usage usage // the bytes users keep, for MaxUserBytes and MaxTotalBytes (usage.go)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// New starts the writer goroutines.
func New(cfg Config) (*Pipe, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	p := &Pipe{cfg: cfg, log: cfg.Logger.With().Str("component", "artifactpipe").Logger(), seed: maphash.MakeSeed()}
	p.stager, _ = cfg.Blobs.(Stager)
	p.usage = usage{p: p, users: map[int64]*tally{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	for range cfg.Writers {
		s := newShard(p)
		p.shards = append(p.shards, s)
		p.wg.Go(s.run)
	}
	return p, nil
}

func (p *Pipe) shardFor(taskID string) *shard {
	return p.shards[maphash.String(p.seed, taskID)%uint64(len(p.shards))]
}

// Submit queues c and reports true, or reports false at once when the
// queue is full (or the pipe closed): nothing of c is kept, c.Ack is not
// called, and the caller answers ErrBusy with c's offset. Safe from a
// gnet event loop: it never blocks and does no I/O.
func (p *Pipe) Submit(c Chunk) bool {
	n := int64(len(c.Data))
	if p.closing.Load() || p.queued.Add(n) > p.cfg.QueueBytes && n > 0 {
		p.queued.Add(-n)
		p.busy.Add(1)
		return false
	}
	if !p.shardFor(c.TaskID).push(item{chunk: c}) {
		p.queued.Add(-n)
		p.busy.Add(1)
		return false
	}
	return true
}

// Detach is called when a connection closes: the uploads it was feeding
// let go of their staging files (another master may resume them) or, when
// they stream, are given up. Never blocks; best effort when a queue is
// full (IdleUpload catches what it misses).
func (p *Pipe) Detach(a Acker) {
	for _, s := range p.shards {
		s.push(item{detach: a})
	}
}

// Forget drops what the pipe keeps of a run that ended (its usage, its
// warnings given, uploads it left unfinished), after its chunks already
// queued. Never blocks; best effort.
func (p *Pipe) Forget(taskID string) {
	p.shardFor(taskID).push(item{forget: taskID})
}

// AddSender counts a connection that sends outputs (+1), or one that went
// away (-1), for Window.
func (p *Pipe) AddSender(delta int) { p.senders.Add(int64(delta)) }

// Window is the artifact credit window to grant a connection now.
func (p *Pipe) Window() uint32 {
	return uint32(min(max(p.cfg.QueueBytes/max(p.senders.Load(), 1), MinWindow), MaxWindow))
}

// Close stops taking chunks, gives up the uploads in progress (a staged
// one stays for the next master) and waits for the writers.
func (p *Pipe) Close() {
	p.once.Do(func() {
		p.closing.Store(true)
		for _, s := range p.shards {
			close(s.quit)
		}
		p.cancel()
		p.wg.Wait()
	})
}

// Stats is the receiver's health, for /api/monitor/health.
func (p *Pipe) Stats() map[string]any {
	uploads := 0
	for _, s := range p.shards {
		uploads += int(s.open.Load())
	}
	return map[string]any{
		"queued_bytes": p.queued.Load(),
		"uploads":      uploads,
		"streams":      p.streams.Load(),
		"stored_files": p.stored.Load(),
		"stored_bytes": p.storedBytes.Load(),
		"refused":      p.refused.Load(),
		"failed":       p.failed.Load(),
		"busy":         p.busy.Load(),
		"staged":       p.stager != nil,
	}
}

// humanBytes is n for a message: "1.0 TiB", "5.0 GiB", "312 KiB", "12 bytes".
func humanBytes(n int64) string {
	switch {
	case n >= 1<<40:
		return fmt.Sprintf("%.1f TiB", float64(n)/(1<<40))
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
