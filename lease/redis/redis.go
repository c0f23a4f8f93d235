// Package redis is the lease backend that several masters share: run leases
// with fencing tokens and worker presence in Redis, through rueidis.
//
// Every operation is one Lua script (lua/*.lua, embedded), sent as EVALSHA
// with a fallback to EVAL on NOSCRIPT, so each is atomic on the server and
// concurrent calls from many goroutines pipeline on rueidis's shared
// connection. The guarantees are the memory backend's, and both pass
// leasetest:
//   - Tokens come from one counter that only grows (INCR); each claim gets a
//     token above every token handed out, restored or ensured before.
//   - A run has at most one live lease; a lease is live while now < expiry.
//   - Only a live lease can be renewed or released; an expired one belongs
//     to the reaper, and Reap returns it to exactly one caller.
//   - An expired lease not reaped yet may be taken over by Claim or Restore.
//
// Time is Redis's: scripts read TIME, so the masters' clocks never matter.
// TTLs are per call (the caller passes WORKER_TASK_TTL_SECONDS for leases,
// WORKER_HB_TTL_SECONDS for presence), rounded up to whole milliseconds.
// Expiries live as scores of sorted sets, never as Redis key TTLs: reaping
// and presence read a range of a sorted set and never scan keys, and no key
// of ours ever carries an expire, which is what makes volatile-* eviction
// policies safe (see checkEviction).
//
// Redis keeps nothing durable here (it may lose acknowledged writes): the
// durable store is the truth, every state change there is fenced, and a
// master that finds Redis empty calls EnsureFenceAbove(store.MaxFence) and
// Restore for the runs it knows.
//
// This package never scans keys (only its tests' cleanup does), never sets
// a key expiry, and never blocks longer than one script's round trip.
package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/rlsched/rlsched/internal/rediskey"
	"github.com/rlsched/rlsched/lease"
)

// Options configure New and Open.
type Options struct {
	// Prefix names the deployment: every key is "{Prefix}:name" (package
	// rediskey),
	// so several deployments, or tests, share one Redis without meeting.
	// Default DefaultPrefix. REDIS_PREFIX in the master's environment.
	Prefix string
	// DetectReset makes Claim and Renew fail with lease.ErrReset while the
	// ready marker (MarkReady) is missing: after Redis lost its state to a
	// restart without persistence or a FLUSHALL, and before a master
	// rebuilt it from the store. Masters set it; a user without a store to
	// rebuild from (a benchmark) leaves it off.
	DetectReset bool
}

// Leases is the Redis backend of lease.Leases. All methods are safe for
// concurrent use.
type Leases struct {
	c      rueidis.Client
	owned  bool // Close closes c
	k      keys
	closed atomic.Bool
	detect bool // Options.DetectReset
}

var _ lease.Leases = (*Leases)(nil)

// errClosed is returned by every method called after Close.
var errClosed = errors.New("redis lease store is closed")

// New returns a backend on c, a client the caller owns (Close leaves it
// open). It refuses a Redis whose eviction policy could drop lease keys.
func New(ctx context.Context, c rueidis.Client, o Options) (*Leases, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if err := rediskey.Check(o.Prefix); err != nil {
		return nil, fmt.Errorf("cannot use redis leases: %w", err)
	}
	if err := checkEviction(ctx, c); err != nil {
		return nil, err
	}
	return &Leases{c: c, k: newKeys(o.Prefix), detect: o.DetectReset}, nil
}

// Open connects to the Redis at addr (host:port) and returns a backend that
// closes its client on Close. For passwords, TLS, Sentinel or Cluster, build
// a rueidis.Client and call New.
func Open(ctx context.Context, addr string, o Options) (*Leases, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{addr},
		// Leases are never read through the client-side cache: a stale
		// read would misjudge ownership.
		DisableCache: true,
	})
	if err != nil {
		return nil, fmt.Errorf("cannot reach redis at %s: %w; check that Redis runs there "+
			"(scripts/services.sh starts a local one)", addr, err)
	}
	l, err := New(ctx, c, o)
	if err != nil {
		c.Close()
		return nil, err
	}
	l.owned = true
	return l, nil
}

// Kind returns "redis".
func (l *Leases) Kind() string { return "redis" }

// Close makes every later call fail and closes the client if Open made it.
// Closing twice is harmless. It deletes nothing: leases outlive a master.
func (l *Leases) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	if l.owned {
		l.c.Close()
	}
	return nil
}

// check returns errClosed after Close and ctx's error when it is done.
func (l *Leases) check(ctx context.Context) error {
	if l.closed.Load() {
		return errClosed
	}
	return ctx.Err()
}

// checkEviction refuses a Redis whose maxmemory-policy may evict our keys.
//
// The rule: noeviction and every volatile-* policy are accepted, allkeys-*
// and anything unknown are refused. volatile-* policies only ever evict keys
// that carry an expire, and this package never sets one (expiries are
// sorted-set scores), so under them a full Redis refuses our writes (an
// error the master reports) instead of dropping a lease, the fencing
// counter or the expiry index; allkeys-* could drop any of those and let a
// run be handed to two workers or a token be handed out twice. The policy
// is refused even while maxmemory is 0 (no limit), because CONFIG SET can
// add a limit at any time without us knowing.
//
// It reads INFO memory rather than CONFIG GET, which managed Redis services
// often forbid.
func checkEviction(ctx context.Context, c rueidis.Client) error {
	info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		return fmt.Errorf("cannot use redis for leases: cannot read its eviction policy (INFO memory): %w; "+
			"check that Redis runs and this user may run INFO", err)
	}
	policy := ""
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
			policy = v
		}
	}
	if policy == "" {
		return errors.New("cannot use redis for leases: INFO memory reports no maxmemory_policy")
	}
	if !evictionSafe(policy) {
		return fmt.Errorf("cannot use redis for leases: its maxmemory-policy is %s, which may evict lease keys "+
			"and hand one run to two workers; set it to noeviction (or a volatile-* policy) with "+
			"`CONFIG SET maxmemory-policy noeviction` and in redis.conf", policy)
	}
	return nil
}

// evictionSafe is checkEviction's rule.
func evictionSafe(policy string) bool {
	return policy == "noeviction" || strings.HasPrefix(policy, "volatile-")
}
