package memory

import (
	"context"
	"fmt"
	"time"
)

// Touch marks workerID present for ttl, attached to masterID (a heartbeat).
// It also drops presence entries that expired, so workers that vanish
// without Forget do not pile up; that costs O(log n) per dropped entry.
func (l *Leases) Touch(ctx context.Context, workerID, masterID string, ttl time.Duration) error {
	if workerID == "" {
		return fmt.Errorf("cannot mark worker present: empty worker ID")
	}
	if err := checkTTL(ttl); err != nil {
		return fmt.Errorf("cannot mark worker %q present: %w", workerID, err)
	}
	now, err := l.lock(ctx)
	if err != nil {
		return fmt.Errorf("cannot mark worker %q present: %w", workerID, err)
	}
	defer l.mu.Unlock()
	for {
		if _, ok := l.presence.popExpired(now); !ok {
			break
		}
	}
	l.presence.put(workerID, masterID, now.Add(ttl))
	return nil
}

// Present reports whether workerID was touched less than its ttl ago and
// not forgotten since.
func (l *Leases) Present(ctx context.Context, workerID string) (bool, error) {
	now, err := l.lock(ctx)
	if err != nil {
		return false, fmt.Errorf("cannot check presence of worker %q: %w", workerID, err)
	}
	defer l.mu.Unlock()
	e, ok := l.presence.get(workerID)
	if ok && !e.live(now) {
		l.presence.remove(workerID)
		return false, nil
	}
	return ok, nil
}

// Forget removes workerID's presence at once (a clean disconnect). An
// absent worker is not an error.
func (l *Leases) Forget(ctx context.Context, workerID string) error {
	if _, err := l.lock(ctx); err != nil {
		return fmt.Errorf("cannot forget worker %q: %w", workerID, err)
	}
	defer l.mu.Unlock()
	l.presence.remove(workerID)
	return nil
}
