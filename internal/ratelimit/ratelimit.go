// Package ratelimit is the submission limit (API.md, Gateway; docs/deploy.md):
// at most max admissions per subject in any window. It keeps a sliding-window
// log, so "the 4th submission within 10 s" is refused exactly, wherever the
// window boundaries fall. The gateway limits what it forwards (with a log in
// Redis shared between gateways, falling back to this one); a master limits
// what reaches it without the gateway's signature (httpapi/submitlimit.go).
package ratelimit

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// Decision is a limiter's answer.
type Decision struct {
	Allowed    bool
	Remaining  int
	RetryAfter time.Duration // when refused
}

// Limiter admits or refuses one event of a subject, and records more events
// of one it admitted (Charge: a sweep's members beyond its one admission),
// never past its max in the window. Safe for concurrent use.
type Limiter interface {
	Allow(ctx context.Context, subject string) (Decision, error)
	Charge(ctx context.Context, subject string, n int) error
}

// Local keeps the logs in this process, in shards. Its methods never fail.
type Local struct {
	window time.Duration
	max    int
	now    func() time.Time
	seed   maphash.Seed
	shards [64]shard
}

type shard struct {
	mu   sync.Mutex
	logs map[string][]time.Time // admissions, oldest first, at most max
	_    [40]byte               // keep shards on their own cache lines
}

// NewLocal is a limiter of at most max events per window; now is the clock.
func NewLocal(window time.Duration, max int, now func() time.Time) *Local {
	l := &Local{window: window, max: max, now: now, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].logs = map[string][]time.Time{}
	}
	return l
}

// shard is subject's shard.
func (l *Local) shard(subject string) *shard {
	return &l.shards[maphash.String(l.seed, subject)%uint64(len(l.shards))]
}

// inWindow is log less the admissions that left the window at now.
func (l *Local) inWindow(log []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(log) && !log[i].After(now.Add(-l.window)) {
		i++
	}
	return log[i:]
}

// Allow admits subject's event when it has fewer than max in the window.
func (l *Local) Allow(_ context.Context, subject string) (Decision, error) {
	sh, now := l.shard(subject), l.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	log := l.inWindow(sh.logs[subject], now)
	if len(log) < l.max {
		log = append(log, now)
		sh.logs[subject] = log
		return Decision{Allowed: true, Remaining: l.max - len(log)}, nil
	}
	sh.logs[subject] = log
	retry := log[0].Add(l.window).Sub(now)
	return Decision{RetryAfter: max(retry, time.Millisecond)}, nil
}

// Charge records n more events of subject, as far as its max allows.
func (l *Local) Charge(_ context.Context, subject string, n int) error {
	sh, now := l.shard(subject), l.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	log := l.inWindow(sh.logs[subject], now)
	for ; n > 0 && len(log) < l.max; n-- {
		log = append(log, now)
	}
	sh.logs[subject] = log
	return nil
}

// Sweep forgets subjects with no admission left in the window; call it every
// window, so that memory follows the subjects of one window.
func (l *Local) Sweep() {
	cutoff := l.now().Add(-l.window)
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, log := range sh.logs {
			if len(log) == 0 || !log[len(log)-1].After(cutoff) {
				delete(sh.logs, k)
			}
		}
		sh.mu.Unlock()
	}
}
