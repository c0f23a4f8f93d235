package memory

import (
	"context"
	"fmt"

	"github.com/rlsched/rlsched/lease"
)

// Reap removes and returns up to limit leases that expired by now (all of
// them when limit <= 0), earliest expiry first. A lease removed here is gone
// from the store, so it goes to exactly one caller however many reapers
// run. It costs O(k log n) for k returned leases: the heap yields them
// without looking at live ones.
func (l *Leases) Reap(ctx context.Context, limit int) ([]lease.Lease, error) {
	now, err := l.lock(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot reap leases: %w", err)
	}
	defer l.mu.Unlock()
	var out []lease.Lease
	for limit <= 0 || len(out) < limit {
		e, ok := l.leases.popExpired(now)
		if !ok {
			break
		}
		l.unchargeLocked(e.key)
		out = append(out, toLease(e))
	}
	return out, nil
}
