// Package depctl is the dependency controller (issue 29): it releases a
// waiting run into the queue once every parent has ended as its condition
// says, and cancels it (reason "dependency", the parent named) once one
// condition can no longer hold; its own dependants follow, transitively,
// since the cancel is a run's end like any other.
//
// It is event-driven: it hears every run change this master commits (it
// is a core.EventSink beside the live hub) and decides the waiting
// children of each run that ended at once, on its own goroutine. A master
// that died between a parent's end and its children's decision leaves
// them decidable in the store (store.Dependencies.DecidableWaiting); every
// master reads those when it starts and every Interval after, so no edge is
// lost to a restart or a failover. What it must never do: block the
// caller of TaskChanged (the store's writers), or place a run (the
// scheduler does, once the run is in the queue).
package depctl

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// DefaultInterval is the pause between two reads of the decidable waiting
// runs: the safety net, not the path a child takes (that is the event).
const DefaultInterval = 5 * time.Second

// endedQueue bounds the ends waiting for the controller; past it an end is
// dropped and the next pass reads the decidable runs from the store
// instead (nothing lost, a little later).
const endedQueue = 1 << 14

// decidePage is how many decidable runs one read of the safety net takes.
const decidePage = 500

// Store is what the controller reads and writes (store.Store satisfies
// it). Its writes must go through the master's published store, so that
// a cancel it makes reaches the dashboards, the notifier and this
// controller again (a cancelled run's own dependants).
type Store interface {
	store.Dependencies
	Task(ctx context.Context, id string) (core.Task, error)
	UpdateTask(ctx context.Context, t *core.Task, exp store.Expect) error
}

// Config is a Controller's parts.
type Config struct {
	Store Store
	// Released hears each run this controller released into the queue,
	// as read back (the scheduler takes it into its page and wakes: the
	// masters' Dispatcher.Queued). It must not block.
	Released func(core.Task)
	// Interval is the pause between reads of the decidable runs
	// (DefaultInterval when 0).
	Interval time.Duration
	// Now is the clock of the cancels' times (time.Now when nil).
	Now func() time.Time
	Log zerolog.Logger
}

// Controller decides waiting runs. TaskChanged and Decide are safe from
// any goroutine; Run owns the rest.
type Controller struct {
	cfg      Config
	ended    chan string
	overflow atomic.Bool
}

// New makes a Controller; Run starts it.
func New(cfg Config) *Controller {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Released == nil {
		cfg.Released = func(core.Task) {}
	}
	return &Controller{cfg: cfg, ended: make(chan string, endedQueue)}
}

// TaskChanged takes a committed run change (core.EventSink): a run that
// ended may decide its waiting children. It never blocks.
func (c *Controller) TaskChanged(t core.Task) {
	if !t.Status.Terminal() {
		return
	}
	select {
	case c.ended <- t.ID:
	default:
		c.overflow.Store(true)
	}
}

// WorkerChanged implements core.EventSink; workers decide nothing here.
func (c *Controller) WorkerChanged(core.WorkerInfo) {}

// Run decides the runs that were left decidable (a restart), then the
// children of each run that ends, until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	c.decideStored(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-c.ended:
			parents := []string{id}
			for len(parents) < decidePage {
				select {
				case id := <-c.ended:
					parents = append(parents, id)
					continue
				default:
				}
				break
			}
			c.decideChildren(ctx, parents)
		case <-tick.C:
			c.decideStored(ctx)
		}
		if c.overflow.Swap(false) {
			c.decideStored(ctx)
		}
	}
}

// decideChildren decides the waiting children of the runs parents, read
// in one query for all of them (one a run ended was a tenth of the
// master's CPU at dispatch speed).
func (c *Controller) decideChildren(ctx context.Context, parents []string) {
	kids, err := c.cfg.Store.WaitingChildren(ctx, parents...)
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.Log.Warn().Err(err).Int("parents", len(parents)).Msg("cannot read the runs waiting for runs that ended; the next pass decides them")
		}
		return
	}
	if len(kids) > 0 {
		if _, err := c.Decide(ctx, kids); err != nil && ctx.Err() == nil {
			c.cfg.Log.Warn().Err(err).Msg("cannot decide waiting runs; the next pass does")
		}
	}
}

// decideStored decides every run the store holds decidable, a page at a
// time.
func (c *Controller) decideStored(ctx context.Context) {
	for ctx.Err() == nil {
		ids, err := c.cfg.Store.DecidableWaiting(ctx, decidePage)
		if err != nil {
			if ctx.Err() == nil {
				c.cfg.Log.Warn().Err(err).Msg("cannot list decidable waiting runs")
			}
			return
		}
		if len(ids) == 0 {
			return
		}
		n, err := c.Decide(ctx, ids)
		if err != nil || n == 0 || len(ids) < decidePage {
			return // a page that decided nothing would be read again: stop
		}
	}
}

// Decide decides the waiting runs ids as their parents stand now: each
// whose conditions all hold is released, each with a condition that can
// no longer hold is cancelled, the others keep waiting. It returns how
// many it decided. The REST API calls it for a run it just created, so
// that a child of a parent that already failed its condition is answered
// CANCELLED, and one whose parents all ended starts without waiting for
// an event that came before it existed.
func (c *Controller) Decide(ctx context.Context, ids []string) (int, error) {
	ps, err := c.cfg.Store.Parents(ctx, ids)
	if err != nil {
		return 0, err
	}
	var release []string
	decided := 0
	var errs []error
	for _, id := range ids {
		ready, failed, _ := core.DepVerdict(ps[id])
		switch {
		case ready:
			release = append(release, id)
		case failed != nil:
			if err := c.cancel(ctx, id, *failed); err != nil {
				errs = append(errs, err)
				continue
			}
			decided++
		}
	}
	if len(release) > 0 {
		n, err := c.cfg.Store.ReleaseWaiting(ctx, release)
		if err != nil {
			return decided, err
		}
		decided += n
		for _, id := range release {
			t, err := c.cfg.Store.Task(ctx, id)
			if err == nil && t.Status == core.StatusQueued && !t.Waiting {
				c.cfg.Released(t)
			}
		}
		c.cfg.Log.Debug().Strs("runs", release).Msg("runs released: their parents ended")
	}
	return decided, errors.Join(errs...)
}

// cancel ends waiting run id for its parent p; a run no longer QUEUED and
// waiting (cancelled by its owner, released meanwhile) is left alone.
func (c *Controller) cancel(ctx context.Context, id string, p core.ParentState) error {
	t, err := c.cfg.Store.Task(ctx, id)
	if errors.Is(err, core.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if t.Status != core.StatusQueued || !t.Waiting {
		return nil
	}
	exp := store.Expect{Fence: t.Fence, Status: t.Status}
	if err := t.CancelForDependency(p, c.cfg.Now()); err != nil {
		return err
	}
	if err := c.cfg.Store.UpdateTask(ctx, &t, exp); err != nil {
		if errors.Is(err, core.ErrFenced) || errors.Is(err, core.ErrNotFound) {
			return nil
		}
		return err
	}
	c.cfg.Log.Info().Str("task", id).Str("parent", p.Parent).Str("parentStatus", string(p.Status)).Msg("run cancelled: its dependency can no longer hold")
	return nil
}

var _ core.EventSink = (*Controller)(nil)
