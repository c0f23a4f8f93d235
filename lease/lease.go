// Package lease owns run leases with fencing tokens and worker presence.
// Claim, renew, release and reap are each atomic; every claim gets a token
// from a monotonic counter, so a stale owner can be recognised anywhere.
// Backends: memory (default, one master) and redis (rueidis + Lua, several
// masters); both must pass the conformance suite in leasetest.
//
// It must never be the truth of a run's state (the store is: a lease only
// says who may write it, and Redis can lose an acknowledged write), and a
// backend must never hand out a token that is not above every earlier one.
package lease

import (
	"context"
	"errors"
	"time"
)

// ErrReset means the backend lost its state (a Redis restarted empty, or
// was flushed) and nobody has rebuilt it yet: Claim and Renew refuse
// rather than hand out tokens below those the store knows, or call a run
// lost whose lease merely vanished. The caller rebuilds (EnsureFenceAbove
// over the store's highest fence, Restore of every active run, MarkReady)
// and retries.
var ErrReset = errors.New("the lease backend lost its state")

// ErrQuota means a ClaimCharged would take its user past a cap of the
// Charge: nothing was claimed.
var ErrQuota = errors.New("the run's owner is at their quota")

// Charge is what a claimed run counts against its owner's quota: its GPUs
// and one run, checked against MaxGPUs and MaxRuns (< 0: no cap) in the
// same atomic step that claims the lease, so masters claiming at once
// never jointly pass a quota. The charge lasts as long as the lease: its
// Release, its Reap, or a claim taking over the expired lease drops it.
// A lease put back by Restore (after the backend lost its state) carries
// no charge until the next claim of its run; the planner's own check, from
// the store, still holds such runs.
type Charge struct {
	User             string // the owner's user id; "" charges nothing
	GPUs             int
	MaxGPUs, MaxRuns int
}

// Lease of one run.
type Lease struct {
	TaskID   string
	WorkerID string
	Fence    uint64
	Expires  time.Time
}

// Renewal is one lease to renew (a heartbeat carries several).
type Renewal struct {
	TaskID string
	Fence  uint64
}

// Leases is implemented by every lease backend. All methods are safe for
// concurrent use.
type Leases interface {
	// Claim leases a run to a worker for ttl and returns a new fencing token,
	// greater than every token handed out before. core.ErrLeaseHeld when a
	// live lease exists.
	Claim(ctx context.Context, taskID, workerID string, ttl time.Duration) (uint64, error)
	// ClaimCharged is Claim that also charges the run to its owner (c):
	// ErrQuota, claiming nothing, when the owner's charged GPUs or runs
	// would pass c's caps.
	ClaimCharged(ctx context.Context, taskID, workerID string, ttl time.Duration, c Charge) (uint64, error)
	// Charged returns the GPUs and runs charged to user now.
	Charged(ctx context.Context, user string) (gpus, runs int, err error)
	// Restore puts back a lease with a known token (after the backend lost its
	// state) unless a live lease already exists; the counter is raised to at
	// least fence. core.ErrLeaseHeld when a lease with another token lives.
	Restore(ctx context.Context, taskID, workerID string, fence uint64, ttl time.Duration) error
	// Renew extends the leases whose token still matches; the result has one
	// error per renewal (nil, or core.ErrLeaseLost).
	Renew(ctx context.Context, rs []Renewal, ttl time.Duration) []error
	// Release drops a lease if the token matches; core.ErrLeaseLost otherwise.
	Release(ctx context.Context, taskID string, fence uint64) error
	// Reap removes and returns every lease that expired by now. Each expired
	// lease is returned to exactly one caller, even with several reapers.
	Reap(ctx context.Context, limit int) ([]Lease, error)
	// Get returns the live lease of a run.
	Get(ctx context.Context, taskID string) (Lease, bool, error)
	// EnsureFenceAbove raises the token counter to at least min.
	EnsureFenceAbove(ctx context.Context, min uint64) error
	// MarkReady records that the backend's state is complete (after a
	// master raised the counter and restored the leases of active runs).
	// A backend that can lose its state without its users noticing (Redis)
	// answers Claim and Renew with ErrReset until it is called, and again
	// once the state is lost; others ignore it.
	MarkReady(ctx context.Context) error

	// Touch marks a worker present for ttl, attached to a master.
	Touch(ctx context.Context, workerID, masterID string, ttl time.Duration) error
	// Present reports whether a worker's presence is live.
	Present(ctx context.Context, workerID string) (bool, error)
	// Forget removes a worker's presence at once (a clean disconnect).
	Forget(ctx context.Context, workerID string) error

	Kind() string // "memory" or "redis"
	Close() error
}
