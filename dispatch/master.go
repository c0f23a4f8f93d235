// Package dispatch is the master side of the RPC: a gnet server speaking the
// framed protocol of package codec, worker sessions, the registry of workers
// and the runs placed on them, the scheduler that carries out what package
// plan decides, preemption, the reaper that turns expired leases into LOST
// runs, the recovery of the leases from the store (at start, after the
// lease backend lost its state, and by reconciliation), and the restore of
// a resumed run's files. Dispatcher composes it
// from components that each own their state (see Dispatcher);
// docs/architecture.md ("dispatch") lists its files.
//
// It never decides a placement itself (package plan does, and holds every
// rule). Event loops only parse frames and hand them on: they never block
// on the store, the lease backend, a disk, or the registry's mutex. Work
// for one worker runs in order on one of a fixed set of shard goroutines
// (not a goroutine per connection), and every queue on the way is bounded.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/artifactpipe"
	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/gpuwatch"
	"github.com/rlsched/rlsched/internal/obs"
	"github.com/rlsched/rlsched/lease"
	"github.com/rlsched/rlsched/logpipe"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/terminal"
)

// Config of a master's dispatcher.
type Config struct {
	Addr      string // RPC listen address, host:port; port 0 picks a free one
	MasterID  string
	JoinToken []byte // at least codec.MinJoinToken bytes; every worker's key derives from it
	// WorkerIDs, when not empty, are the only worker ids admitted
	// (WORKER_IDS); a Hello naming another is refused with a logged reason.
	WorkerIDs []string
	// OpenRegistration: anyone may register (REGISTRATION=open), so a
	// worker whose runs run as the account named like their user
	// (core.IsolationUser) is refused.
	OpenRegistration  bool
	HeartbeatInterval time.Duration // told to workers; default 10s
	HeartbeatTTL      time.Duration // a session silent this long is closed; default 3 intervals
	LeaseTTL          time.Duration // run lease as workers are told; held for longer (leaseHold); default 2 min
	CancelGrace       time.Duration // SIGTERM → SIGKILL on the worker; default 10s
	ReapInterval      time.Duration // default LeaseTTL/10, at most 1s
	MaxFrame          int           // default codec.DefaultMaxBody
	// MaxHelloFrame limits the frames of a connection that has not sent
	// its Hello yet, so an unauthenticated peer holds little memory; it
	// fits the Hello of a worker listing about 250 runs. Default 16 KiB.
	MaxHelloFrame int
	// MaxOutbound is how many bytes queued for a worker and not yet taken
	// by its socket a connection may hold; past it the worker is a slow
	// consumer and its connection is closed. Default 2 × MaxFrame.
	MaxOutbound int
	Shards      int // ordered work queues; default 8
	// ShardBacklog bounds the functions waiting on one shard; a worker
	// whose report finds its shard full is disconnected. Default 65,536.
	ShardBacklog int
	// ShardAsync bounds the goroutines recording one shard's TaskStarted
	// and TaskFinished reports at once: enough that the writes of many runs
	// share a group commit. Default 256.
	ShardAsync int
	// OnWorker, when set, receives a worker's view after each change of its
	// state or runs (for live dashboards). It must not block.
	OnWorker func(core.WorkerInfo)
	// OnCancel, when set, is told of each cancel request of an active run
	// after the store recorded it, so other masters can deliver it at once
	// (CancelNotified). It must not block. Setting it says masters are
	// several: the master then also looks for requests in the store every
	// heartbeat interval.
	OnCancel func(taskID string)
	// Clock is the time the dispatcher decides by: when a session is
	// silent, the Hello deadline, the times written into runs. (Leases
	// expire by their backend's own clock.) Tests pass a fake one, the
	// same to memory.WithClock, and advance it instead of sleeping through
	// TTLs. Default time.Now.
	Clock func() time.Time
	// ForgetAfter is how long a DOWN worker stays listed
	// (WORKER_FORGET_SECONDS); default 24 h.
	ForgetAfter time.Duration
	// Metrics receive the dispatcher's counts (heartbeats, scheduler
	// passes); default a new obs.MasterMetrics nobody serves.
	Metrics *obs.MasterMetrics
	// Logs writes the runs' output: event loops submit LogData frames to it
	// and it acks them. Required; the caller owns it (closes it after Stop).
	Logs *logpipe.Writer
	// Outputs takes the files of runs' output dirs (ArtifactChunk), and
	// Blobs is the store they end in, from which resumed attempts are
	// restored. Without them chunks are refused and nothing is restored.
	// The caller owns both (closes Outputs after Stop).
	Outputs *artifactpipe.Pipe
	Blobs   artifact.Store
	// GPUWatch are the rules applied to the workers' GPU samples (idle
	// runs: IDLE_GPU_UTIL, IDLE_GPU_SECONDS, IDLE_GPU_ACTION); the zero
	// value is gpuwatch.DefaultConfig().
	GPUWatch gpuwatch.Config
	// InteractiveIdle (INTERACTIVE_IDLE_MINUTES) ends an interactive run
	// whose GPUs stayed idle (GPUWatch's rule) and whose terminal got no
	// input that long, with a notice in its terminal first; 0: never.
	InteractiveIdle time.Duration
	// Policy is the scheduling policy's settings (policy.go).
	Policy Policy
	Logger zerolog.Logger

	allowed map[string]bool // WorkerIDs as a set (defaults); nil: any id
}

func (c *Config) defaults() error {
	if err := codec.CheckJoinToken(string(c.JoinToken)); err != nil {
		return fmt.Errorf("WORKER_JOIN_TOKEN: %w", err)
	}
	c.allowed = nil
	if len(c.WorkerIDs) > 0 {
		c.allowed = make(map[string]bool, len(c.WorkerIDs))
		for _, id := range c.WorkerIDs {
			if !core.ValidWorkerID(id) {
				return fmt.Errorf("WORKER_IDS: %q is not a worker id ([A-Za-z0-9_-]{1,64})", id)
			}
			c.allowed[id] = true
		}
	}
	if c.MasterID == "" {
		return errors.New("a master id is required")
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if c.HeartbeatTTL <= 0 {
		c.HeartbeatTTL = 3 * c.HeartbeatInterval
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 2 * time.Minute
	}
	if c.CancelGrace <= 0 {
		c.CancelGrace = 10 * time.Second
	}
	if c.GPUWatch == (gpuwatch.Config{}) {
		c.GPUWatch = gpuwatch.DefaultConfig()
	}
	if err := c.GPUWatch.Validate(); err != nil {
		return err
	}
	if c.ReapInterval <= 0 {
		c.ReapInterval = min(c.LeaseTTL/10, time.Second)
	}
	if c.MaxFrame <= 0 {
		c.MaxFrame = codec.DefaultMaxBody
	}
	if c.MaxHelloFrame <= 0 {
		c.MaxHelloFrame = 16 << 10
	}
	c.MaxHelloFrame = min(c.MaxHelloFrame, c.MaxFrame)
	if c.MaxOutbound <= 0 {
		c.MaxOutbound = 2 * c.MaxFrame
	}
	if c.Shards <= 0 {
		c.Shards = 8
	}
	if c.ShardBacklog <= 0 {
		c.ShardBacklog = 1 << 16
	}
	if c.ShardAsync <= 0 {
		c.ShardAsync = 256
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.ForgetAfter <= 0 {
		c.ForgetAfter = 24 * time.Hour
	}
	if c.Metrics == nil {
		c.Metrics = obs.NewMasterMetrics(obs.MasterMetricsOptions{})
	}
	c.Policy.defaults()
	return nil
}

// Dispatcher runs the master side of the RPC. It composes the components
// below, each of which owns its state and is asked through its methods;
// the sessions' reports and cancels are its own methods, on the state they
// name. Its exported methods are safe for concurrent use.
type Dispatcher struct {
	cfg     Config
	log     zerolog.Logger
	st      store.Store
	ls      lease.Leases
	logs    *logpipe.Writer
	outputs *artifactpipe.Pipe // Config.Outputs (artifacts.go)

	srv     *server    // the RPC server: engine, address, connections before Hello (server.go)
	shards  []*shard   // ordered work per worker (shard.go)
	sched   scheduler  // the scheduler loop and the executor (schedule.go, execute.go)
	reg     registry   // workers and placed runs; its mutex is its own (registry.go)
	inputs  planInputs // the planner's snapshots and the users' standing (inputs.go)
	preempt preempter  // preemption, on the scheduler's tick (preempt.go)
	explain explainer  // Explain's plan of the queue, cached (explain.go)
	restore restorer   // a resumed attempt's files (restorestream.go)
	gpus    gpuRules   // the GPU rules at each heartbeat (gpus.go)
	peers   peers      // the hooks of several masters (multimaster.go)
	reap    reaper     // expired leases, silent sessions, the periodic jobs on its tick (reap.go)
	rec     recoverer  // start-up recovery, the lease backend's rebuild, reconciliation (recover.go, reconcile.go)
	// retrying: runs found lost whose writes the store has not taken yet
	// (lostruns.go, reaper.lost).
	retrying lostRuns
	// terms: the terminals of interactive runs (terminal.go).
	terms *terminal.Hub
	// proxyIDs numbers the streams to web apps (proxy.go).
	proxyIDs atomic.Uint64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New builds a dispatcher; Start runs it. Run output goes to cfg.Logs.
func New(cfg Config, st store.Store, ls lease.Leases) (*Dispatcher, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if cfg.Logs == nil {
		return nil, errors.New("BUG: a master needs a log writer (Config.Logs)")
	}
	d := &Dispatcher{cfg: cfg, log: cfg.Logger.With().Str("component", "dispatch").Logger(),
		st: st, logs: cfg.Logs, outputs: cfg.Outputs, terms: terminal.NewHub()}
	d.ls = &resetGuard{Leases: ls, rebuild: d.rec.rebuild} // recover.go
	d.srv = &server{d: d, booted: make(chan struct{}), runErr: make(chan error, 1)}
	d.reg.init()
	d.inputs = planInputs{st: st, reg: &d.reg, policy: cfg.Policy, now: cfg.Clock}
	d.restore = restorer{st: st, blobs: cfg.Blobs, warn: d.warn, log: d.log}
	d.gpus = gpuRules{cfg: cfg.GPUWatch, points: cfg.Logs, warn: d.warn, cancel: d.cancelIdle, changed: d.workerChanged,
		sessions: d.idleSessions,
		wake:     d.wakeScheduler, log: d.log}
	d.peers = peers{st: st, reg: &d.reg, resendCancel: d.resendCancel, notify: d.Notify, changed: d.workerChanged, log: d.log}
	d.explain = explainer{queue: st, inputs: &d.inputs}
	d.preempt = preempter{queue: st, inputs: &d.inputs, reg: &d.reg, cooldown: cfg.Policy.PreemptCooldown,
		sessions: cfg.Policy.InteractivePreempts, now: cfg.Clock, log: d.log}
	d.sched = scheduler{st: st, ls: d.ls, reg: &d.reg, joinToken: cfg.JoinToken, inputs: &d.inputs, preempt: &d.preempt, restore: &d.restore, hold: d.leaseHold,
		now: cfg.Clock, changed: d.workerChanged, resendCancel: d.resendCancel, metrics: cfg.Metrics, log: d.log, wake: make(chan struct{}, 1)}
	d.reap = reaper{ls: d.ls, st: st, reg: &d.reg, retrying: &d.retrying, update: d.updateTask, forgetLogs: d.logs.Forget,
		changed: d.workerChanged, notify: d.Notify, closeLateHellos: d.srv.closeLateHellos, reconcile: d.rec.reconcile,
		reconcilePeriod: d.rec.reconcilePeriod, forgetDown: d.forgetDown, noteSilent: d.noteSilent, every: cfg.ReapInterval, heartbeatTTL: cfg.HeartbeatTTL,
		heartbeatInterval: cfg.HeartbeatInterval, now: cfg.Clock, log: d.log}
	d.rec = recoverer{st: st, ls: d.ls, reg: &d.reg, retrying: &d.retrying, hold: d.leaseHold, lost: d.reap.lost, reap: d.reap.reapOnce,
		loadCancels: d.peers.loadCancels, leaseTTL: cfg.LeaseTTL, log: d.log}
	if cfg.OnCancel != nil { // several masters
		d.reap.sweepCancels = d.peers.sweepCancels
	}
	return d, nil
}

// Start recovers state from the store, starts the RPC server, the scheduler
// and the reaper, and returns once the server listens.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.restore.start(d.ctx)
	if err := d.rec.recover(ctx); err != nil {
		return err
	}
	for i := 0; i < d.cfg.Shards; i++ {
		s := newShard(d.cfg.ShardBacklog, d.cfg.ShardAsync)
		d.shards = append(d.shards, s)
		d.wg.Add(1)
		go func() { defer d.wg.Done(); s.run(d.ctx) }()
	}
	loops := eventLoops() // procs.go
	if err := d.srv.listen(ctx, loops); err != nil {
		return err
	}
	d.wg.Add(2)
	go func() { defer d.wg.Done(); d.sched.run(d.ctx) }()
	// Counted from the recovery just done, not from whenever the goroutine
	// gets to run.
	reconcileAt := d.now().Add(d.rec.reconcilePeriod())
	go func() { defer d.wg.Done(); d.reap.run(d.ctx, reconcileAt) }()
	d.log.Info().Str("rpc", d.srv.addr()).Str("master", d.cfg.MasterID).Int("event_loops", loops).Int("gomaxprocs", runtime.GOMAXPROCS(0)).
		Msg("dispatcher started")
	return nil
}

// Addr is the address the RPC server listens on.
func (d *Dispatcher) Addr() string { return d.srv.addr() }

// MasterID names this master.
func (d *Dispatcher) MasterID() string { return d.cfg.MasterID }

// Stop closes the server and waits for the background goroutines.
func (d *Dispatcher) Stop(ctx context.Context) error {
	if d.cancel == nil {
		return nil
	}
	err := d.srv.stop(ctx)
	d.cancel()
	d.wg.Wait()
	return err
}

// LogStats is the log writer's health, for /api/monitor/health.
func (d *Dispatcher) LogStats() map[string]any {
	if d.logs == nil {
		return map[string]any{"status": "stopped"}
	}
	return d.logs.Stats()
}

// leaseHold is how long the master holds a run's lease from a claim or
// renewal: the TTL the worker is told (LeaseTTL) plus a margin for the two
// clocks running at different rates, 10% and 1 s. The worker stops the run
// by itself once a whole TTL passed since it sent its last acknowledged
// renewal, which is before the master received it; so by the time the
// master reaps the lease and requeues the run, the worker's own deadline
// has passed even if its clock ran up to 10% slow (docs/protocol.md,
// "Heartbeats and leases").
func (d *Dispatcher) leaseHold() time.Duration {
	return d.cfg.LeaseTTL + d.cfg.LeaseTTL/10 + time.Second
}

// now is the dispatcher's clock (Config.Clock).
func (d *Dispatcher) now() time.Time { return d.cfg.Clock() }

// Notify wakes the scheduler: the queue may have changed (a run created,
// requeued, reprioritised, or another master's), so its next pass reads
// the queue again (queuePage).
func (d *Dispatcher) Notify() { d.sched.notify() }

// Queued takes a run just stored QUEUED by this master's REST API into the
// page of the queue the scheduler holds (queuePage), and wakes it
// (httpapi.Control).
func (d *Dispatcher) Queued(t core.Task) { d.sched.queued(t) }

// wakeScheduler wakes the scheduler for capacity that freed.
func (d *Dispatcher) wakeScheduler() { d.sched.wakeUp() }
