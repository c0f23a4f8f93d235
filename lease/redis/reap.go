package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/rlsched/rlsched/lease"
)

// reapBatch bounds the leases one reap script removes, so a large backlog
// never holds Redis for long.
const reapBatch = 500

// Reap removes and returns up to limit leases that expired by now (all of
// them when limit <= 0), earliest expiry first, in scripts of at most
// reapBatch. Each script removes what it returns, so an expired lease goes
// to exactly one caller however many masters reap. The expiry sorted set
// yields expired leases without touching live ones.
//
// When a later script fails after earlier ones succeeded, the leases
// already removed are returned without the error (they are the caller's
// now; the error comes back on the next call). A reply lost to the network
// loses its leases: the caller's reconciliation of active runs against
// Get must treat an active run without a live lease as lost.
func (l *Leases) Reap(ctx context.Context, limit int) ([]lease.Lease, error) {
	var out []lease.Lease
	for {
		n := reapBatch
		if limit > 0 {
			n = min(n, limit-len(out))
		}
		got, err := l.reap(ctx, n)
		if err != nil {
			if len(out) > 0 {
				return out, nil
			}
			return nil, fmt.Errorf("cannot reap leases: %w", err)
		}
		out = append(out, got...)
		if len(got) < n || (limit > 0 && len(out) >= limit) {
			return out, nil
		}
	}
}

// reap runs one reap script for at most n leases.
func (l *Leases) reap(ctx context.Context, n int) ([]lease.Lease, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	res, err := reapScript.Exec(ctx, l.c, []string{l.k.leases, l.k.expiry, l.k.charges, l.k.quotaUse},
		[]string{strconv.Itoa(n)}).ToArray()
	if err != nil {
		return nil, err
	}
	if len(res)%4 != 0 {
		return nil, fmt.Errorf("BUG: reap script returned %d values, not 4 per lease", len(res))
	}
	out := make([]lease.Lease, 0, len(res)/4)
	for i := 0; i < len(res); i += 4 {
		task, _ := res[i].ToString()
		worker, _ := res[i+2].ToString()
		fence, err := parseFence(&res[i+1])
		if err != nil {
			return nil, err
		}
		expires, err := parseMillis(&res[i+3])
		if err != nil {
			return nil, err
		}
		out = append(out, lease.Lease{TaskID: task, WorkerID: worker, Fence: fence, Expires: expires})
	}
	return out, nil
}
