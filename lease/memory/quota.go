package memory

import (
	"context"
	"fmt"

	"github.com/rlsched/rlsched/lease"
)

// use is what is charged to one user.
type use struct{ gpus, runs int }

// chargeLocked charges taskID's claim to c.User, or refuses past c's caps.
func (l *Leases) chargeLocked(taskID string, c lease.Charge) error {
	if c.User == "" {
		return nil
	}
	u := l.charged[c.User]
	if u == nil {
		u = &use{}
	}
	if (c.MaxGPUs >= 0 && u.gpus+c.GPUs > c.MaxGPUs) || (c.MaxRuns >= 0 && u.runs+1 > c.MaxRuns) {
		return fmt.Errorf("%w: user %s has %d GPUs and %d runs charged (caps %d and %d), the run needs %d GPUs",
			lease.ErrQuota, c.User, u.gpus, u.runs, c.MaxGPUs, c.MaxRuns, c.GPUs)
	}
	u.gpus += c.GPUs
	u.runs++
	l.charged[c.User] = u
	l.charges[taskID] = c
	return nil
}

// unchargeLocked drops the charge of taskID's lease, if any.
func (l *Leases) unchargeLocked(taskID string) {
	c, ok := l.charges[taskID]
	if !ok {
		return
	}
	delete(l.charges, taskID)
	if u := l.charged[c.User]; u != nil {
		u.gpus -= c.GPUs
		u.runs--
		if u.runs <= 0 {
			delete(l.charged, c.User)
		}
	}
}

// Charged returns what is charged to user now.
func (l *Leases) Charged(ctx context.Context, user string) (int, int, error) {
	if _, err := l.lock(ctx); err != nil {
		return 0, 0, fmt.Errorf("cannot read the charges of user %s: %w", user, err)
	}
	defer l.mu.Unlock()
	if u := l.charged[user]; u != nil {
		return u.gpus, u.runs, nil
	}
	return 0, 0, nil
}
