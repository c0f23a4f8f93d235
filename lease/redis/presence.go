package redis

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// touchPrune bounds the expired presences one Touch drops; heartbeats come
// often enough that a small bound keeps the index clean.
const touchPrune = "64"

// Touch marks workerID present for ttl, attached to masterID (a heartbeat).
// It also drops up to a few presences that expired, so workers that vanish
// without Forget do not pile up.
func (l *Leases) Touch(ctx context.Context, workerID, masterID string, ttl time.Duration) error {
	if workerID == "" {
		return errors.New("cannot mark worker present: empty worker ID")
	}
	ms, err := ttlArg(ttl)
	if err == nil {
		err = l.check(ctx)
	}
	if err != nil {
		return fmt.Errorf("cannot mark worker %q present: %w", workerID, err)
	}
	if err := touchScript.Exec(ctx, l.c, []string{l.k.presence, l.k.masters},
		[]string{workerID, masterID, ms, touchPrune}).Error(); err != nil {
		return fmt.Errorf("cannot mark worker %q present: %w", workerID, err)
	}
	return nil
}

// Present reports whether workerID was touched less than its ttl ago and
// not forgotten since.
func (l *Leases) Present(ctx context.Context, workerID string) (bool, error) {
	_, ok, err := l.Presence(ctx, workerID)
	return ok, err
}

// Presence is Present that also says which master the worker's last Touch
// named, so any master can find the one a worker is connected to (to
// forward a log tail or a cancel).
func (l *Leases) Presence(ctx context.Context, workerID string) (masterID string, ok bool, err error) {
	if err := l.check(ctx); err != nil {
		return "", false, fmt.Errorf("cannot check presence of worker %q: %w", workerID, err)
	}
	res, err := presentScript.Exec(ctx, l.c, []string{l.k.presence, l.k.masters}, []string{workerID}).ToArray()
	if err != nil {
		return "", false, fmt.Errorf("cannot check presence of worker %q: %w", workerID, err)
	}
	if len(res) == 0 {
		return "", false, fmt.Errorf("cannot check presence of worker %q: BUG: present script returned nothing", workerID)
	}
	if code, _ := res[0].AsInt64(); code != 1 || len(res) < 2 {
		return "", false, nil
	}
	masterID, _ = res[1].ToString()
	return masterID, true, nil
}

// Forget removes workerID's presence at once (a clean disconnect). An
// absent worker is not an error.
func (l *Leases) Forget(ctx context.Context, workerID string) error {
	if err := l.check(ctx); err != nil {
		return fmt.Errorf("cannot forget worker %q: %w", workerID, err)
	}
	if err := forgetScript.Exec(ctx, l.c, []string{l.k.presence, l.k.masters}, []string{workerID}).Error(); err != nil {
		return fmt.Errorf("cannot forget worker %q: %w", workerID, err)
	}
	return nil
}
