package dispatch

import (
	"context"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
	"github.com/rlsched/rlsched/store"
)

// planInputs takes what the planner sees (plan.Snapshot) for the
// scheduler, preemption and Explain alike: the registry's snapshot, the
// caps of the queue's sweeps (sweeplimit.go), the users' standing
// (policy.go) and the reservation time. It owns the standing's cache and
// nothing else; it reads the store and the registry and never changes
// either, and it decides nothing (package plan does). Safe from any
// goroutine.
type planInputs struct {
	st       inputStore
	reg      *registry
	policy   Policy
	now      func() time.Time
	standing standing
}

// inputStore is what planInputs reads of the store.
type inputStore interface {
	SweepLimits(ctx context.Context, ids []string) (map[string]core.SweepLimit, error)
	Usage(ctx context.Context, now time.Time, halfLife time.Duration) ([]store.UserUsage, error)
}

// snapshot is the registry's snapshot for queue, complete.
func (in *planInputs) snapshot(ctx context.Context, queue []core.Task) (plan.Snapshot, error) {
	snap := in.reg.snapshot(queue)
	return snap, in.complete(ctx, &snap, queue)
}

// complete adds to snap, the registry's snapshot for queue, what the
// store knows: the sweeps' caps, the users' standing, and the reservation
// time.
func (in *planInputs) complete(ctx context.Context, snap *plan.Snapshot, queue []core.Task) error {
	var err error
	if snap.Sweeps, err = in.sweepLimits(ctx, queue); err != nil {
		return fmt.Errorf("cannot read the limits of sweeps: %w", err)
	}
	if snap.Users, err = in.users(ctx); err != nil {
		return fmt.Errorf("cannot read the users' usage and quotas: %w", err)
	}
	snap.ReserveBefore = in.reserveBefore()
	snap.SessionsFirst = in.policy.InteractivePreempts
	return nil
}
