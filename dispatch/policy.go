package dispatch

import (
	"context"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
	"github.com/rlsched/rlsched/lease"
	"github.com/rlsched/rlsched/store"
)

// Policy is the scheduling policy's settings (API.md "Scheduling policy").
type Policy struct {
	// HalfLife (FAIRSHARE_HALF_LIFE) is how fast usage is forgotten;
	// default 168 h.
	HalfLife time.Duration
	// DefaultGPUQuota (DEFAULT_USER_GPU_QUOTA) caps the active GPUs of a
	// user without a quota of their own; 0: no cap.
	DefaultGPUQuota int
	// BackfillReserve (BACKFILL_RESERVE_SECONDS) is how long a GPU run may
	// wait behind smaller runs that backfill past it before it holds the
	// worker where it fits best (plan.Snapshot.ReserveBefore); default
	// 300 s, < 0: never.
	BackfillReserve time.Duration
	// PreemptCooldown (PREEMPT_COOLDOWN_SECONDS) spares a run preempted
	// this recently from another preemption; default 300 s, < 0: no
	// preemption at all.
	PreemptCooldown time.Duration
	// InteractivePreempts (INTERACTIVE_PREEMPTS, issue 34) lets a queued
	// interactive run that fits nowhere preempt preemptible batch runs of
	// its own priority too (plan.PreemptInput.InteractiveOverBatch).
	InteractivePreempts bool
}

// DefaultBackfillReserve is BACKFILL_RESERVE_SECONDS's default.
const DefaultBackfillReserve = 300 * time.Second

// DefaultHalfLife is FAIRSHARE_HALF_LIFE's default.
const DefaultHalfLife = 168 * time.Hour

func (p *Policy) defaults() {
	if p.HalfLife <= 0 {
		p.HalfLife = DefaultHalfLife
	}
	if p.BackfillReserve == 0 {
		p.BackfillReserve = DefaultBackfillReserve
	}
	if p.PreemptCooldown == 0 {
		p.PreemptCooldown = DefaultPreemptCooldown
	}
}

// usersTTL is how long one read of the users' standing serves the
// scheduler's passes. Usage moves slowly; what users have active is checked
// again, exactly, by the lease claim (quota in the lease backend) and by
// the in-flight runs the planner counts. Between reads, the runs this
// master places and ends move the standing it holds (standingMoved), so a
// pass does not read the store for them: re-reading after every pass that
// placed a run was 12% of the master's CPU at 1,000 submissions/s. What
// other masters do, and the runs that end other ways (lost, requeued), is
// seen at the next read. A read that lands between a run's write and its
// move counts the run twice (or not at all) until the next read; the
// planner is then off by one run for a second, and the claim still
// decides.
const usersTTL = time.Second

// standing caches the users' standing; its own mutex guards it. The map
// is never changed once handed out (a pass or GET /api/queue may be
// reading it): standingMoved replaces it.
type standing struct {
	mu    sync.Mutex
	at    time.Time
	users map[int64]plan.User
	// lent: users was handed out since it was made, so a move copies it
	// first; the moves between two passes share one copy.
	lent bool
}

// users returns every user's standing for the planner (plan.Snapshot.Users):
// usage, what they have active, and their quota, DefaultGPUQuota for those
// without a GPU cap of their own.
func (in *planInputs) users(ctx context.Context) (map[int64]plan.User, error) {
	c := &in.standing
	c.mu.Lock()
	defer c.mu.Unlock()
	now := in.now()
	if c.users != nil && now.Sub(c.at) < usersTTL && !now.Before(c.at) {
		c.lent = true
		return c.users, nil
	}
	us, err := in.st.Usage(ctx, now, in.policy.HalfLife)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]plan.User, len(us))
	for _, u := range us {
		out[u.UserID] = in.planUser(u)
	}
	c.users, c.at, c.lent = out, now, true
	return out, nil
}

// planUser is u as the planner sees it.
func (in *planInputs) planUser(u store.UserUsage) plan.User {
	p := plan.User{Name: u.User, Usage: u.Usage, ActiveGPUs: u.ActiveGPUs, ActiveRuns: u.ActiveRuns, MaxGPUs: -1, MaxRuns: -1}
	switch {
	case u.Quota.GPUs != nil:
		p.MaxGPUs = *u.Quota.GPUs
	case in.policy.DefaultGPUQuota > 0:
		p.MaxGPUs = in.policy.DefaultGPUQuota
	}
	if u.Quota.Runs != nil {
		p.MaxRuns = *u.Quota.Runs
	}
	return p
}

// userMove is what one run placed (+1) or ended (−1) changes in its
// owner's standing.
type userMove struct {
	userID int64
	gpus   int
	runs   int // +1 or −1
}

// standingMoved applies moves to the cached standing, if any.
func (in *planInputs) standingMoved(moves []userMove) {
	if len(moves) == 0 {
		return
	}
	c := &in.standing
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.users == nil {
		return
	}
	out := c.users
	if c.lent { // every run's end moves it: copy once per pass, not per move
		out, c.lent = maps.Clone(out), false
	}
	for _, mv := range moves {
		u, ok := out[mv.userID]
		if !ok {
			continue
		}
		u.ActiveGPUs = max(u.ActiveGPUs+mv.runs*mv.gpus, 0)
		u.ActiveRuns = max(u.ActiveRuns+mv.runs, 0)
		out[mv.userID] = u
	}
	c.users = out
}

// chargeOf is what claiming t charges its owner in the lease backend: its
// GPUs and one run, against the quota the plan saw (none: counted, never
// refused).
func chargeOf(t *core.Task, users map[int64]plan.User) lease.Charge {
	c := lease.Charge{User: strconv.FormatInt(t.UserID, 10), GPUs: t.GPUs, MaxGPUs: -1, MaxRuns: -1}
	if u, ok := users[t.UserID]; ok {
		c.MaxGPUs, c.MaxRuns = u.MaxGPUs, u.MaxRuns
	}
	return c
}

// reserveBefore is plan.Snapshot.ReserveBefore now: runs queued before it
// may hold a worker (zero: reservations are off).
func (in *planInputs) reserveBefore() time.Time {
	if in.policy.BackfillReserve < 0 {
		return time.Time{}
	}
	return in.now().Add(-in.policy.BackfillReserve)
}
