package memory

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/lease"
)

// Claim leases taskID to workerID for ttl and returns a new fencing token.
// It fails with core.ErrLeaseHeld while a live lease exists; an expired
// lease that was not reaped yet is taken over (see the package comment).
func (l *Leases) Claim(ctx context.Context, taskID, workerID string, ttl time.Duration) (uint64, error) {
	return l.ClaimCharged(ctx, taskID, workerID, ttl, lease.Charge{})
}

// ClaimCharged is Claim that charges the run to c.User under the same
// mutex: lease.ErrQuota, claiming nothing, past c's caps.
func (l *Leases) ClaimCharged(ctx context.Context, taskID, workerID string, ttl time.Duration, c lease.Charge) (uint64, error) {
	if err := checkClaim(taskID, workerID, ttl); err != nil {
		return 0, fmt.Errorf("cannot claim run %q: %w", taskID, err)
	}
	now, err := l.lock(ctx)
	if err != nil {
		return 0, fmt.Errorf("cannot claim run %q: %w", taskID, err)
	}
	defer l.mu.Unlock()
	if e, ok := l.leases.get(taskID); ok && e.live(now) {
		return 0, fmt.Errorf("cannot claim run %q: %w by worker %q (fence %d)",
			taskID, core.ErrLeaseHeld, e.val.worker, e.val.fence)
	}
	if l.fence == math.MaxUint64 {
		// Unreachable by counting; only EnsureFenceAbove or Restore with a
		// corrupt value gets here. Wrapping would reuse tokens, so refuse.
		return 0, fmt.Errorf("cannot claim run %q: fencing counter exhausted", taskID)
	}
	l.unchargeLocked(taskID) // an expired lease taken over
	if err := l.chargeLocked(taskID, c); err != nil {
		return 0, fmt.Errorf("cannot claim run %q: %w", taskID, err)
	}
	l.fence++
	l.leases.put(taskID, holder{worker: workerID, fence: l.fence}, now.Add(ttl))
	return l.fence, nil
}

// Restore puts back the lease (taskID, workerID, fence) for ttl, after the
// lease state was lost, unless a live lease exists. A live lease with the
// same worker and fence is the same claim: it is renewed and nil returned;
// any other live lease gives core.ErrLeaseHeld. The counter is raised to at
// least fence in every case, so later claims stay above every known token.
func (l *Leases) Restore(ctx context.Context, taskID, workerID string, fence uint64, ttl time.Duration) error {
	err := checkClaim(taskID, workerID, ttl)
	if err == nil && fence == 0 {
		err = errors.New("fence 0 is never handed out")
	}
	if err != nil {
		return fmt.Errorf("cannot restore lease of run %q: %w", taskID, err)
	}
	now, err := l.lock(ctx)
	if err != nil {
		return fmt.Errorf("cannot restore lease of run %q: %w", taskID, err)
	}
	defer l.mu.Unlock()
	l.fence = max(l.fence, fence)
	h := holder{worker: workerID, fence: fence}
	if e, ok := l.leases.get(taskID); ok && e.live(now) && e.val != h {
		return fmt.Errorf("cannot restore lease of run %q with fence %d: %w by worker %q (fence %d)",
			taskID, fence, core.ErrLeaseHeld, e.val.worker, e.val.fence)
	}
	l.leases.put(taskID, h, now.Add(ttl))
	return nil
}

// Renew extends to now+ttl every lease in rs that is live and carries the
// given token. The result has one entry per renewal: nil, or an error
// wrapping core.ErrLeaseLost (no lease, another token, or expired: an
// expired lease belongs to the reaper). When ctx is done, the store is
// closed or ttl is not positive, every entry carries that error instead.
func (l *Leases) Renew(ctx context.Context, rs []lease.Renewal, ttl time.Duration) []error {
	errs := make([]error, len(rs))
	fail := func(err error) []error {
		for i := range errs {
			errs[i] = fmt.Errorf("cannot renew lease of run %q: %w", rs[i].TaskID, err)
		}
		return errs
	}
	if err := checkTTL(ttl); err != nil {
		return fail(err)
	}
	now, err := l.lock(ctx)
	if err != nil {
		return fail(err)
	}
	defer l.mu.Unlock()
	for i, r := range rs {
		e, ok := l.liveLocked(now, r.TaskID, r.Fence)
		if !ok {
			errs[i] = fmt.Errorf("cannot renew lease of run %q with fence %d: %w", r.TaskID, r.Fence, core.ErrLeaseLost)
			continue
		}
		l.leases.put(r.TaskID, e.val, now.Add(ttl))
	}
	return errs
}

// Release drops the live lease of taskID if it carries fence; otherwise
// core.ErrLeaseLost (an expired lease is left for the reaper).
func (l *Leases) Release(ctx context.Context, taskID string, fence uint64) error {
	now, err := l.lock(ctx)
	if err != nil {
		return fmt.Errorf("cannot release lease of run %q: %w", taskID, err)
	}
	defer l.mu.Unlock()
	if _, ok := l.liveLocked(now, taskID, fence); !ok {
		return fmt.Errorf("cannot release lease of run %q with fence %d: %w", taskID, fence, core.ErrLeaseLost)
	}
	l.leases.remove(taskID)
	l.unchargeLocked(taskID)
	return nil
}

// Get returns the live lease of taskID; an expired lease is not returned,
// even before it is reaped.
func (l *Leases) Get(ctx context.Context, taskID string) (lease.Lease, bool, error) {
	now, err := l.lock(ctx)
	if err != nil {
		return lease.Lease{}, false, fmt.Errorf("cannot get lease of run %q: %w", taskID, err)
	}
	defer l.mu.Unlock()
	e, ok := l.leases.get(taskID)
	if !ok || !e.live(now) {
		return lease.Lease{}, false, nil
	}
	return toLease(e), true, nil
}

// EnsureFenceAbove raises the counter to at least min, so the next claim
// returns a token above min (used when the durable store knows higher
// tokens than this fresh store). It never lowers the counter.
func (l *Leases) EnsureFenceAbove(ctx context.Context, min uint64) error {
	if _, err := l.lock(ctx); err != nil {
		return fmt.Errorf("cannot raise fencing counter to %d: %w", min, err)
	}
	defer l.mu.Unlock()
	l.fence = max(l.fence, min)
	return nil
}

// liveLocked returns the lease of taskID if it is live and carries fence.
func (l *Leases) liveLocked(now time.Time, taskID string, fence uint64) (*timed[holder], bool) {
	e, ok := l.leases.get(taskID)
	if !ok || e.val.fence != fence || !e.live(now) {
		return nil, false
	}
	return e, true
}

func toLease(e *timed[holder]) lease.Lease {
	return lease.Lease{TaskID: e.key, WorkerID: e.val.worker, Fence: e.val.fence, Expires: e.expires}
}

func checkClaim(taskID, workerID string, ttl time.Duration) error {
	switch {
	case taskID == "":
		return errors.New("empty task ID")
	case workerID == "":
		return errors.New("empty worker ID")
	}
	return checkTTL(ttl)
}

// MarkReady does nothing: memory leases live and die with the process.
func (l *Leases) MarkReady(ctx context.Context) error { return nil }
