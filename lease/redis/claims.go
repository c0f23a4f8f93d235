package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/lease"
)

// renewBatch bounds the renewals one script runs, so a huge heartbeat never
// holds Redis for long; larger lists go out as several scripts at once,
// which rueidis pipelines.
const renewBatch = 256

// Claim leases taskID to workerID for ttl and returns a new fencing token.
// It fails with core.ErrLeaseHeld while a live lease exists; an expired
// lease that was not reaped yet is taken over.
func (l *Leases) Claim(ctx context.Context, taskID, workerID string, ttl time.Duration) (uint64, error) {
	return l.ClaimCharged(ctx, taskID, workerID, ttl, lease.Charge{})
}

// ClaimCharged is Claim that charges the run to c.User in the same script:
// lease.ErrQuota, claiming nothing, past c's caps (claim.lua).
func (l *Leases) ClaimCharged(ctx context.Context, taskID, workerID string, ttl time.Duration, c lease.Charge) (uint64, error) {
	ms, err := checkClaim(taskID, workerID, ttl)
	if err == nil {
		err = l.check(ctx)
	}
	if err != nil {
		return 0, fmt.Errorf("cannot claim run %q: %w", taskID, err)
	}
	res, err := claimScript.Exec(ctx, l.c, l.readyKeys(l.k.fence, l.k.leases, l.k.expiry, l.k.charges, l.k.quotaUse),
		[]string{taskID, workerID, ms, c.User, strconv.Itoa(c.GPUs), strconv.Itoa(c.MaxGPUs), strconv.Itoa(c.MaxRuns)}).ToArray()
	if err != nil {
		return 0, fmt.Errorf("cannot claim run %q: %w", taskID, err)
	}
	if len(res) != 3 {
		return 0, fmt.Errorf("cannot claim run %q: BUG: claim script returned %d values", taskID, len(res))
	}
	code, _ := res[0].AsInt64()
	switch code {
	case -1:
		return 0, fmt.Errorf("cannot claim run %q: %w", taskID, lease.ErrReset)
	case -2:
		g, _ := res[1].ToString()
		r, _ := res[2].ToString()
		return 0, fmt.Errorf("cannot claim run %q: %w: user %s has %s GPUs and %s runs charged (caps %d and %d), the run needs %d GPUs",
			taskID, lease.ErrQuota, c.User, g, r, c.MaxGPUs, c.MaxRuns, c.GPUs)
	}
	fence, err := parseFence(&res[1])
	if err != nil {
		return 0, fmt.Errorf("cannot claim run %q: %w", taskID, err)
	}
	if code != 1 {
		holder, _ := res[2].ToString()
		return 0, fmt.Errorf("cannot claim run %q: %w by worker %q (fence %d)", taskID, core.ErrLeaseHeld, holder, fence)
	}
	return fence, nil
}

// Charged returns the GPUs and runs charged to user now.
func (l *Leases) Charged(ctx context.Context, user string) (int, int, error) {
	if err := l.check(ctx); err != nil {
		return 0, 0, fmt.Errorf("cannot read the charges of user %s: %w", user, err)
	}
	vs, err := l.c.Do(ctx, l.c.B().Hmget().Key(l.k.quotaUse).Field("g:"+user, "r:"+user).Build()).ToArray()
	if err != nil || len(vs) != 2 {
		return 0, 0, fmt.Errorf("cannot read the charges of user %s: %v", user, err)
	}
	g, _ := vs[0].AsInt64()
	r, _ := vs[1].AsInt64()
	return int(g), int(r), nil
}

// Restore puts back the lease (taskID, workerID, fence) for ttl, after the
// lease state was lost, unless a live lease exists. A live lease with the
// same worker and fence is the same claim: it is renewed and nil returned;
// any other live lease gives core.ErrLeaseHeld. The counter is raised to at
// least fence in every case, so later claims stay above every known token.
func (l *Leases) Restore(ctx context.Context, taskID, workerID string, fence uint64, ttl time.Duration) error {
	ms, err := checkClaim(taskID, workerID, ttl)
	if err == nil {
		err = checkFence(fence)
	}
	if err == nil && fence == 0 {
		err = errors.New("fence 0 is never handed out")
	}
	if err == nil {
		err = l.check(ctx)
	}
	if err != nil {
		return fmt.Errorf("cannot restore lease of run %q: %w", taskID, err)
	}
	res, err := restoreScript.Exec(ctx, l.c, []string{l.k.fence, l.k.leases, l.k.expiry},
		[]string{taskID, workerID, fenceArg(fence), ms}).ToArray()
	if err != nil {
		return fmt.Errorf("cannot restore lease of run %q: %w", taskID, err)
	}
	if len(res) == 0 {
		return fmt.Errorf("cannot restore lease of run %q: BUG: restore script returned nothing", taskID)
	}
	if code, _ := res[0].AsInt64(); code == 1 {
		return nil
	}
	if len(res) != 3 {
		return fmt.Errorf("cannot restore lease of run %q: BUG: restore script returned %d values", taskID, len(res))
	}
	held, _ := parseFence(&res[1])
	holder, _ := res[2].ToString()
	return fmt.Errorf("cannot restore lease of run %q with fence %d: %w by worker %q (fence %d)",
		taskID, fence, core.ErrLeaseHeld, holder, held)
}

// Renew extends to now+ttl every lease in rs that is live and carries the
// given token. The result has one entry per renewal: nil, or an error
// wrapping core.ErrLeaseLost (no lease, another token, or expired: an
// expired lease belongs to the reaper). Up to renewBatch renewals go in one
// script; more go as several scripts at once, pipelined. When Redis cannot
// be reached, ctx is done, the store is closed or ttl is not positive, the
// entries affected carry that error instead.
func (l *Leases) Renew(ctx context.Context, rs []lease.Renewal, ttl time.Duration) []error {
	errs := make([]error, len(rs))
	if len(rs) == 0 {
		return errs
	}
	ms, err := ttlArg(ttl)
	if err == nil {
		err = l.check(ctx)
	}
	if err != nil {
		failRenewals(rs, errs, err)
		return errs
	}
	if len(rs) <= renewBatch {
		l.renew(ctx, rs, ms, errs)
		return errs
	}
	var wg sync.WaitGroup
	for from := 0; from < len(rs); from += renewBatch {
		to := min(from+renewBatch, len(rs))
		// Each goroutine writes only its own part of errs.
		wg.Go(func() { l.renew(ctx, rs[from:to], ms, errs[from:to]) })
	}
	wg.Wait()
	return errs
}

// renew runs one renew script for rs and fills errs (same length).
func (l *Leases) renew(ctx context.Context, rs []lease.Renewal, ms string, errs []error) {
	args := make([]string, 0, 1+2*len(rs))
	args = append(args, ms)
	for _, r := range rs {
		args = append(args, r.TaskID, fenceArg(r.Fence))
	}
	got, err := renewScript.Exec(ctx, l.c, l.readyKeys(l.k.leases, l.k.expiry), args).AsIntSlice()
	if err == nil && len(got) > 0 && got[0] == -1 {
		err = lease.ErrReset
	}
	if err == nil && len(got) != len(rs) {
		err = fmt.Errorf("BUG: renew script returned %d verdicts for %d renewals", len(got), len(rs))
	}
	if err != nil {
		failRenewals(rs, errs, err)
		return
	}
	for i, ok := range got {
		if ok != 1 {
			errs[i] = fmt.Errorf("cannot renew lease of run %q with fence %d: %w", rs[i].TaskID, rs[i].Fence, core.ErrLeaseLost)
		}
	}
}

func failRenewals(rs []lease.Renewal, errs []error, err error) {
	for i := range errs {
		errs[i] = fmt.Errorf("cannot renew lease of run %q: %w", rs[i].TaskID, err)
	}
}

// Release drops the live lease of taskID if it carries fence; otherwise
// core.ErrLeaseLost (an expired lease is left for the reaper).
func (l *Leases) Release(ctx context.Context, taskID string, fence uint64) error {
	if err := l.check(ctx); err != nil {
		return fmt.Errorf("cannot release lease of run %q: %w", taskID, err)
	}
	n, err := releaseScript.Exec(ctx, l.c, []string{l.k.leases, l.k.expiry, l.k.charges, l.k.quotaUse},
		[]string{taskID, fenceArg(fence)}).AsInt64()
	if err != nil {
		return fmt.Errorf("cannot release lease of run %q: %w", taskID, err)
	}
	if n != 1 {
		return fmt.Errorf("cannot release lease of run %q with fence %d: %w", taskID, fence, core.ErrLeaseLost)
	}
	return nil
}

// Get returns the live lease of taskID; an expired lease is not returned,
// even before it is reaped.
func (l *Leases) Get(ctx context.Context, taskID string) (lease.Lease, bool, error) {
	if err := l.check(ctx); err != nil {
		return lease.Lease{}, false, fmt.Errorf("cannot get lease of run %q: %w", taskID, err)
	}
	res, err := getScript.Exec(ctx, l.c, []string{l.k.leases, l.k.expiry}, []string{taskID}).ToArray()
	if err != nil {
		return lease.Lease{}, false, fmt.Errorf("cannot get lease of run %q: %w", taskID, err)
	}
	if len(res) == 0 {
		return lease.Lease{}, false, nil
	}
	if len(res) != 3 {
		return lease.Lease{}, false, fmt.Errorf("cannot get lease of run %q: BUG: get script returned %d values", taskID, len(res))
	}
	fence, err := parseFence(&res[0])
	if err != nil {
		return lease.Lease{}, false, fmt.Errorf("cannot get lease of run %q: %w", taskID, err)
	}
	worker, _ := res[1].ToString()
	expires, err := parseMillis(&res[2])
	if err != nil {
		return lease.Lease{}, false, fmt.Errorf("cannot get lease of run %q: %w", taskID, err)
	}
	return lease.Lease{TaskID: taskID, WorkerID: worker, Fence: fence, Expires: expires}, true, nil
}

// EnsureFenceAbove raises the counter to at least min, so the next claim
// returns a token above min (used when Redis came back empty and the
// durable store knows higher tokens). It never lowers the counter. Redis
// counts in int64, so min must be at most 2^63-1.
func (l *Leases) EnsureFenceAbove(ctx context.Context, min uint64) error {
	err := checkFence(min)
	if err == nil {
		err = l.check(ctx)
	}
	if err != nil {
		return fmt.Errorf("cannot raise fencing counter to %d: %w", min, err)
	}
	if err := ensureFenceScript.Exec(ctx, l.c, []string{l.k.fence}, []string{fenceArg(min)}).Error(); err != nil {
		return fmt.Errorf("cannot raise fencing counter to %d: %w", min, err)
	}
	return nil
}

func checkClaim(taskID, workerID string, ttl time.Duration) (string, error) {
	switch {
	case taskID == "":
		return "", errors.New("empty task ID")
	case workerID == "":
		return "", errors.New("empty worker ID")
	}
	return ttlArg(ttl)
}

// checkFence refuses tokens Redis's int64 counter cannot hold (the SQL
// stores cannot either).
func checkFence(f uint64) error {
	if f > math.MaxInt64 {
		return fmt.Errorf("fence %d is above 2^63-1", f)
	}
	return nil
}

// MarkReady sets the ready marker that Claim and Renew require: the state
// is complete. Redis loses it with everything else on FLUSHALL or a
// restart without persistence, which is how the loss is noticed.
func (l *Leases) MarkReady(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return fmt.Errorf("cannot mark the lease state ready: %w", err)
	}
	if err := l.c.Do(ctx, l.c.B().Set().Key(l.k.ready).Value("1").Build()).Error(); err != nil {
		return fmt.Errorf("cannot mark the lease state ready: %w", err)
	}
	return nil
}

// readyKeys appends the ready marker to a script's keys when the backend
// detects resets (Options.DetectReset).
func (l *Leases) readyKeys(ks ...string) []string {
	if l.detect {
		ks = append(ks, l.k.ready)
	}
	return ks
}
