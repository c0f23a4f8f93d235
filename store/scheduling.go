package store

import (
	"context"
	"slices"
	"time"

	"github.com/rlsched/rlsched/core"
)

// Scheduling is the part of Store behind the scheduling policy (API.md
// "Scheduling policy": priority rights, fair share, quotas). It is
// embedded in Store; every backend implements it.
type Scheduling interface {
	// SetPriority changes the priority of a QUEUED run and returns the run
	// as written. core.ErrNotFound for an unknown run, core.ErrConflict
	// when it is no longer QUEUED.
	SetPriority(ctx context.Context, id string, priority int) (core.Task, error)
	// AddUsage adds each charge's GPU-seconds to its user's usage, in one
	// transaction. A user's usage is kept as a value at an instant and
	// decays with halfLife (core.Decay): a charge is added at its own
	// instant. Charges of unknown users are dropped.
	AddUsage(ctx context.Context, cs []UsageCharge, halfLife time.Duration) error
	// Usage returns every user not deleted, by id, with their usage at now
	// (the decayed charges plus the GPU-seconds of their DISPATCHED and
	// RUNNING runs so far, undecayed), what they have active, and their
	// quota (Quota's nil fields: none set).
	Usage(ctx context.Context, now time.Time, halfLife time.Duration) ([]UserUsage, error)
	// SetQuota replaces a user's quota (nil fields: no cap); core.ErrNotFound
	// for an unknown or deleted user.
	SetQuota(ctx context.Context, userID int64, q core.Quota) error
}

// UsageCharge is what one run used: GPU-seconds (core.UsageWeight × its
// time running) of its owner, at the instant it ended.
type UsageCharge struct {
	UserID     int64
	GPUSeconds float64
	At         time.Time
}

// UserUsage is a user's standing for the scheduler and GET /api/users/usage.
type UserUsage struct {
	UserID     int64
	User       string
	Usage      float64 // GPU-seconds, decayed, running runs included
	ActiveGPUs int     // of DISPATCHED and RUNNING runs; shares of GPUs summed, rounded up
	ActiveRuns int
	Quota      core.Quota
}

// Accruing wraps st so that every run its updates move out of DISPATCHED or
// RUNNING charges its owner's usage (AddUsage) with what it ran: its GPUs
// (core.UsageWeight) × the time from StartedAt to its end (FinishedAt, or
// the write's time). The charge rides the update (Update.Charge), so the
// store adds it in the update's own transaction, only if the row matched:
// under a Batcher, the charges of a whole group commit cost that one
// commit. Each master's writes go through its own, so each run's end is
// charged once. Everything else passes through. Safe for concurrent use,
// as st is.
func Accruing(st Store, halfLife time.Duration) Store {
	return &accruing{Store: st, halfLife: halfLife}
}

type accruing struct {
	Store
	halfLife time.Duration
}

func (a *accruing) UpdateTask(ctx context.Context, t *core.Task, exp Expect) error {
	u := Update{Task: t, Expect: exp}
	if !a.charge(&u) {
		return a.Store.UpdateTask(ctx, t, exp)
	}
	return a.Store.UpdateTasks(ctx, []Update{u})[0]
}

func (a *accruing) UpdateTasks(ctx context.Context, us []Update) []error {
	var charged []Update
	for i := range us {
		u := us[i]
		if a.charge(&u) {
			if charged == nil {
				charged = slices.Clone(us)
			}
			charged[i] = u
		}
	}
	if charged == nil {
		return a.Store.UpdateTasks(ctx, us)
	}
	return a.Store.UpdateTasks(ctx, charged)
}

// charge sets u's charge when its write would end a run that started.
func (a *accruing) charge(u *Update) bool {
	c, ok := chargeOf(u.Task, u.Expect.Status)
	if ok {
		u.Charge, u.ChargeHalfLife = &c, a.halfLife
	}
	return ok
}

// chargeOf is what t, just written from status from, charges its owner:
// something when it left DISPATCHED or RUNNING having started.
func chargeOf(t *core.Task, from core.Status) (UsageCharge, bool) {
	if !from.Active() || t.Status.Active() || t.StartedAt == nil {
		return UsageCharge{}, false
	}
	end := t.UpdatedAt
	if t.FinishedAt != nil {
		end = *t.FinishedAt
	}
	d := end.Sub(*t.StartedAt)
	if d <= 0 {
		return UsageCharge{}, false
	}
	// A multi-node group ran its GPUs and cores on each of its members.
	return UsageCharge{UserID: t.UserID, GPUSeconds: core.UsageWeight(t.GPUCount(), t.CPUs) * float64(t.Group()) * d.Seconds(), At: end}, true
}

// SetPriority changes a queued run's priority and publishes it. Priority is
// the one field remembered with the fixed ones that changes (only while
// QUEUED), so the memory of the run is dropped and rebuilt from the write.
func (ts *publisher) SetPriority(ctx context.Context, id string, priority int) (core.Task, error) {
	defer ts.locks.lock(id)()
	t, err := ts.Store.SetPriority(ctx, id, priority)
	if err != nil {
		return t, err
	}
	ts.forget(id)
	ts.remember(&t)
	ts.sink.TaskChanged(t)
	return t, nil
}
