package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/lease"
)

// recoverer gives the lease backend back what the store says it holds:
// at start-up (recover), when the backend lost its state (rebuild, asked
// by resetGuard), and about once a lease TTL for the active runs that
// nothing would ever find lost (reconcile.go). It owns the time of the last
// rebuild and the mutex that runs one rebuild at a time; the runs are the
// registry's, and it calls a run lost through the reaper (lost). It never
// replaces a live lease (Restore leaves one alone) and never requeues a
// run by itself. recover runs once, in Start, before anything else;
// reconcile on the reaper's goroutine; rebuild and restoreLease are safe
// from any goroutine.
type recoverer struct {
	st       recoverStore
	ls       recoverLeases
	reg      *registry
	retrying *lostRuns
	hold     func() time.Duration // the lease hold (Dispatcher.leaseHold)
	// lost calls a run lost (reaper.lost); reap reaps the expired leases
	// (reaper.reapOnce); loadCancels marks the runs whose cancel the store
	// records (peers).
	lost        func(ctx context.Context, id string, fence uint64, reason string)
	reap        func(ctx context.Context)
	loadCancels func(ctx context.Context, ids []string)
	leaseTTL    time.Duration // Config.LeaseTTL: reconciliation's period
	log         zerolog.Logger

	mu    sync.Mutex
	fixed time.Time // when the last rebuild finished
}

// recoverStore is what the recoverer reads of the store.
type recoverStore interface {
	MaxFence(ctx context.Context) (uint64, error)
	ActiveTasks(ctx context.Context) ([]core.Task, error)
	Task(ctx context.Context, id string) (core.Task, error)
}

// recoverLeases is what the recoverer asks of the lease backend.
type recoverLeases interface {
	Restore(ctx context.Context, taskID, workerID string, fence uint64, ttl time.Duration) error
	Release(ctx context.Context, taskID string, fence uint64) error
	Get(ctx context.Context, taskID string) (lease.Lease, bool, error)
	EnsureFenceAbove(ctx context.Context, min uint64) error
	MarkReady(ctx context.Context) error
}

// recover rebuilds the registry from the store after a (re)start. The store
// is the truth: every DISPATCHED or RUNNING run gets its lease back for one
// TTL, so its worker can reconnect and re-adopt it with its fencing token;
// runs whose workers never come back are reaped as LOST.
//
// With several masters, the others' runs are among them: Restore leaves a
// live lease alone (ErrLeaseHeld; the same worker and fence is merely
// renewed), so this never takes a run from the master that holds it. The
// registry keeps such runs, so that their workers can move here.
func (c *recoverer) recover(ctx context.Context) error {
	active, err := c.rebuildLeases(ctx)
	if err != nil {
		return err
	}
	for _, t := range active {
		if t.Worker == "" || t.Fence == 0 {
			c.lost(ctx, t.ID, t.Fence, "active run without a worker at master start")
			continue
		}
		c.reg.adopt(recordOf(t))
	}
	ids := make([]string, len(active))
	for i, t := range active {
		ids[i] = t.ID
	}
	c.loadCancels(ctx, ids) // a cancel requested before the restart still stops its run
	if len(active) > 0 {
		c.log.Info().Int("runs", len(active)).Msg("waiting for workers to re-adopt active runs")
	}
	return nil
}

// rebuildLeases makes the lease backend's state complete from the store:
// the fencing counter above every fence the store knows, the lease of
// every active run (unless a live one exists), then the ready mark. It
// returns the active runs. Used at start, and when the backend lost its
// state (Redis restarted empty or flushed): then every master does it, and
// Restore makes their work idempotent.
func (c *recoverer) rebuildLeases(ctx context.Context) ([]core.Task, error) {
	max, err := c.st.MaxFence(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot read the highest fence: %w", err)
	}
	if err := c.ls.EnsureFenceAbove(ctx, max); err != nil {
		return nil, fmt.Errorf("cannot raise the fencing counter: %w", err)
	}
	active, err := c.st.ActiveTasks(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot read active runs: %w", err)
	}
	for _, t := range active {
		if err := c.restoreLease(ctx, t); err != nil {
			return nil, err
		}
	}
	if err := c.ls.MarkReady(ctx); err != nil {
		return nil, err
	}
	return active, nil
}

// restoreLease gives active run t its lease back for one hold (leaseHold),
// unless a live lease exists (the same worker and fence is merely renewed):
// its worker renews it, else the reaper finds it expired and the run is
// lost. A run without a worker or fence has no lease to restore (recover
// and reconcile call it lost).
func (c *recoverer) restoreLease(ctx context.Context, t core.Task) error {
	if t.Worker == "" || t.Fence == 0 {
		return nil
	}
	err := c.ls.Restore(ctx, t.ID, t.Worker, t.Fence, c.hold())
	if err != nil && !errors.Is(err, core.ErrLeaseHeld) {
		return fmt.Errorf("cannot restore the lease of %s: %w", t.ID, err)
	}
	return nil
}

// resetGuard is the lease backend as the dispatcher uses it: when Claim or
// Renew finds that the backend lost its state (lease.ErrReset), it has the
// recoverer rebuild the state from the store and retries, instead of
// reporting the run's lease lost (which would stop a healthy run) or
// failing the placement. It keeps no state.
type resetGuard struct {
	lease.Leases
	// rebuild is recoverer.rebuild: seen is when the caller found the
	// backend's state lost.
	rebuild func(ctx context.Context, seen time.Time) error
}

// rebuild runs one rebuild at a time; callers that waited for another's
// rebuild do not repeat it.
func (c *recoverer) rebuild(ctx context.Context, seen time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fixed.After(seen) {
		return nil
	}
	c.log.Warn().Msg("the lease backend lost its state (Redis restarted empty or flushed): rebuilding it from the store")
	active, err := c.rebuildLeases(ctx)
	if err != nil {
		c.log.Error().Err(err).Msg("cannot rebuild the lease state")
		return err
	}
	c.fixed = time.Now()
	c.log.Info().Int("runs", len(active)).Msg("lease state rebuilt")
	return nil
}

func (g *resetGuard) Claim(ctx context.Context, taskID, workerID string, ttl time.Duration) (uint64, error) {
	seen := time.Now()
	f, err := g.Leases.Claim(ctx, taskID, workerID, ttl)
	if errors.Is(err, lease.ErrReset) && g.rebuild(ctx, seen) == nil {
		f, err = g.Leases.Claim(ctx, taskID, workerID, ttl)
	}
	return f, err
}

func (g *resetGuard) ClaimCharged(ctx context.Context, taskID, workerID string, ttl time.Duration, c lease.Charge) (uint64, error) {
	seen := time.Now()
	f, err := g.Leases.ClaimCharged(ctx, taskID, workerID, ttl, c)
	if errors.Is(err, lease.ErrReset) && g.rebuild(ctx, seen) == nil {
		f, err = g.Leases.ClaimCharged(ctx, taskID, workerID, ttl, c)
	}
	return f, err
}

func (g *resetGuard) Renew(ctx context.Context, rs []lease.Renewal, ttl time.Duration) []error {
	seen := time.Now()
	errs := g.Leases.Renew(ctx, rs, ttl)
	for _, err := range errs {
		if errors.Is(err, lease.ErrReset) {
			if g.rebuild(ctx, seen) == nil {
				errs = g.Leases.Renew(ctx, rs, ttl)
			}
			break
		}
	}
	return errs
}
