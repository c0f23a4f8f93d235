package worker

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rlsched/rlsched/internal/backoff"
	"github.com/rlsched/rlsched/worker/cgroup"
	"github.com/rlsched/rlsched/worker/codecache"
	"github.com/rlsched/rlsched/worker/isolation"
	"github.com/rlsched/rlsched/worker/leaseguard"
	"github.com/rlsched/rlsched/worker/nvsmi"
	"github.com/rlsched/rlsched/worker/outputs"
	"github.com/rs/zerolog"
)

// agent is one running worker. Its run state is the run table's (table.go);
// the rest is set before the first session, then read-only.
type agent struct {
	cfg        Config
	instance   string // Hello.instance, kept in the data dir
	log        zerolog.Logger
	scriptsDir string
	iso        *isolation.Isolator // whose uid each run gets, and its private dir
	cg         *cgroup.Manager     // each run's control group
	caches     *isolation.Caches   // each user's persistent cache dir; nil: none
	envs       *envs               // the Python envs it built (pyenv.go); nil: none
	code       *codecache.Cache    // runs' code snapshots (code.go)
	rt         *containerRuntime   // runs runs' images (image.go); nil: none
	offer      offer               // the cores and memory runs may have (Hello)
	labels     map[string]string   // Hello.labels: the operator's and the automatic ones
	guard      *leaseguard.Guard   // nil when the guard could not start
	spawner    *spawner
	tab        *runTable
	out        *outputs.Link // the outputs of every run
	kickc      chan struct{} // wakes the current session's writer
	// sampler samples the GPUs (gpusample.go); nil without GPUs.
	sampler *nvsmi.Sampler
	// mps runs the MPS daemons of GPU_SHARING=mps (mps.go); nil otherwise.
	mps *mps
}

// Worker is a started worker: it joins a master (failing over along
// Config.Masters) and runs what it is given until Close. Close is safe to
// call from any goroutine, more than once.
type Worker struct {
	stop context.CancelFunc
	done chan struct{} // closed once the worker stopped
}

// Start starts a worker. It returns an error only when the worker cannot
// start (bad config, unwritable DataDir, DataDir in use by another worker,
// ctx done), and then nothing of it is left running. ctx bounds the start
// only: the worker runs until Close. A worker never stops on its own (it
// rejoins its masters until Close), so unlike masterd.Master it has no Err.
func Start(ctx context.Context, cfg Config) (*Worker, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// Before anything touches the dir: it may be another live worker's.
	dir, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			dir.close()
		}
	}()
	if cfg.ID == "" {
		cfg.ID = defaultID(cfg.Host, dir.suffix)
	}
	a := &agent{
		cfg:      cfg,
		instance: dir.instance,
		log:      cfg.Logger.With().Str("worker", cfg.ID).Logger(),
		kickc:    make(chan struct{}, 1),
	}
	a.out = outputs.NewLink(cfg.ArtifactSync, backoff.Backoff{Min: busyBackoffMin, Max: busyBackoffMax}, a.kick)
	if a.iso, err = isolation.New(isolation.Options{RunAs: cfg.RunAs, RunUIDs: cfg.RunUIDs, UIDLockDir: cfg.UIDLockDir, DataDir: cfg.DataDir,
		Runs: cfg.Slots + len(cfg.GPUs)}, a.log); err != nil {
		return nil, err
	}
	// Before the guard starts: on cgroup v2 the worker may move itself
	// into a leaf of its own, which its child must not block.
	if a.offer, err = machineOffer(cfg); err != nil {
		return nil, err
	}
	a.labels = helloLabels(cfg, len(a.offer.cores))
	if a.cg, err = cgroup.Open(cgroup.Options{Mode: cfg.ResourceEnforcement, Name: dir.instance, Cores: a.offer.cores,
		Self: a.offer.all, MemoryMB: a.offer.memoryMB, GPUs: cgroupGPUs(cfg.GPUs), PidsMax: cfg.PidsMax, Log: a.log}); err != nil {
		return nil, err
	}
	if a.caches, err = isolation.NewCaches(cfg.DataDir, cfg.CacheMaxMB, a.log); err != nil {
		return nil, err
	}
	if cfg.GPUSharing == SharingMPS {
		if a.mps, err = newMPS(cfg, a.log); err != nil {
			return nil, err
		}
	}
	if cfg.EnvCacheMB >= 0 {
		if a.envs, err = newEnvs(cfg.DataDir, cfg.EnvCacheMB, a.log); err != nil {
			return nil, err
		}
	}
	if a.rt, err = openRuntime(cfg); err != nil {
		return nil, err
	}
	if a.code, err = codecache.Open(filepath.Join(cfg.DataDir, "code"), cfg.CodeCacheMB<<20, a.log); err != nil {
		return nil, err
	}
	// Spilled output of an earlier worker process: its runs died with it.
	if err := os.RemoveAll(filepath.Join(cfg.DataDir, "spool")); err != nil {
		a.log.Warn().Err(err).Msg("cannot remove the old output spool")
	}
	if a.scriptsDir, err = materialiseScripts(filepath.Join(cfg.DataDir, "scripts")); err != nil {
		return nil, err
	}
	if a.guard, err = leaseguard.Start(a.log, a.iso.UIDLockDir()); err != nil {
		a.log.Error().Err(err).Msg("no guard process: runs may outlive a crashed or frozen worker")
	}
	a.tab = newRunTable(cfg.Grace, a.log, a.guard, a.out, a.kick)
	a.log.Info().Strs("masters", cfg.Masters).Int("gpus", len(cfg.GPUs)).Int("slots", cfg.Slots).
		Str("data_dir", cfg.DataDir).Msg("worker starting")

	a.spawner = startSpawner()
	life, stop := context.WithCancel(context.Background())
	a.sampler = a.startSampler(life)
	w := &Worker{stop: stop, done: make(chan struct{})}
	ok = true
	go func() {
		defer close(w.done)
		defer dir.close()
		var bg sync.WaitGroup
		bg.Go(func() { a.fenceLoop(life) })
		bg.Go(func() { a.diskLoop(life) })
		a.connectLoop(life)
		bg.Wait()
		a.tab.shutdown()
		a.cg.Close()
		a.spawner.stop()
		a.guard.Close()
		a.log.Info().Msg("worker stopped")
	}()
	return w, nil
}

// Close stops the worker: it leaves its master, stops its runs (SIGTERM,
// Config.Grace, SIGKILL) and waits until they are reaped and the guard is
// gone, or until ctx is done, whichever comes first.
func (w *Worker) Close(ctx context.Context) {
	w.stop()
	select {
	case <-w.done:
	case <-ctx.Done():
	}
}

// MaybeGuard runs the lease guard and exits when this process was started
// as one (a worker starts its guard by running its own binary again);
// otherwise it returns at once. Call it first thing in main, and in
// TestMain of any test that runs a worker.
func MaybeGuard() { leaseguard.MaybeServe() }

// Run is Start, then Close once ctx is done, for callers that tie a
// worker's life to a context (the tests of dispatch and masterd).
func Run(ctx context.Context, cfg Config) error {
	w, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	w.Close(context.Background())
	return nil
}

// kick wakes the current session's writer. Safe from any goroutine; never
// blocks and takes no lock. A kick while no session is joined wakes the
// next one's writer once, early: harmless.
func (a *agent) kick() {
	select {
	case a.kickc <- struct{}{}:
	default:
	}
}

// windowFrom is the credit window a master granted (HelloAck or LogAck
// log_window), or cur when it named none (0: an older master, or no
// change). It never exceeds the worker's own logWindow, nor goes below one
// byte, whatever the master says.
func windowFrom(granted uint32, cur int) int {
	if granted == 0 {
		return cur
	}
	return min(max(int(granted), 1), logWindow)
}

// backoffLocked pauses the run's output for the next backoff delay, unless
// a pause is already running (the refusals of frames that were in flight
// together count once). Caller holds runTable.mu.
func (r *run) backoffLocked() (time.Duration, bool) {
	now := time.Now()
	if now.Before(r.retryAt) {
		return 0, false
	}
	d := r.retry.Delay()
	r.retryAt = now.Add(d)
	return d, true
}

// busyBackoffLocked is backoffLocked for a "busy" refusal: a full queue
// drains in a fraction of a second, so the pause starts shorter and stops
// growing sooner than for a master that cannot store output, and it is
// jittered so the runs refused together do not come back together.
func (r *run) busyBackoffLocked() (time.Duration, bool) {
	now := time.Now()
	if now.Before(r.retryAt) {
		return 0, false
	}
	r.busyRetry.Min, r.busyRetry.Max = busyBackoffMin, busyBackoffMax
	d := r.busyRetry.Delay()
	r.retryAt = now.Add(d)
	return d, true
}

// removeRunDir removes a finished run's output dir, whose every file the
// master stored, and its task's dir once no attempt is left in it: a
// worker would otherwise keep every output of every run it ever ran.
// os.RemoveAll follows no symbolic link the run left (it works from
// directory descriptors), and the dirs above are the worker's.
func removeRunDir(r *run) {
	if r.dirs.In != "" { // its parents' outputs: copies of what the master keeps
		if err := os.RemoveAll(r.dirs.In); err != nil {
			r.log.Warn().Err(err).Str("dir", r.dirs.In).Msg("cannot remove the run's input dir")
		}
	}
	if err := os.RemoveAll(r.dirs.Out); err != nil {
		r.log.Warn().Err(err).Str("dir", r.dirs.Out).Msg("cannot remove the run's output dir")
		return
	}
	_ = os.Remove(filepath.Dir(r.dirs.Out)) // fails while another attempt's dir is there
}
