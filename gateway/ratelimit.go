package gateway

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/rlsched/rlsched/internal/rediskey"
)

// The submission limit (API.md, Gateway): at most max admissions per subject
// (a verified user, else a client IP) in any window. Both backends keep a
// sliding-window log, so "the 4th submission within 10 s" is refused exactly,
// wherever the window boundaries fall.

// decision is a limiter's answer.
type decision struct {
	allowed    bool
	remaining  int
	retryAfter time.Duration // when refused
}

// limiter admits or refuses one event of a subject, and records more events
// of one it admitted (charge: a sweep's members beyond its one admission),
// never past its max in the window. Safe for concurrent use.
type limiter interface {
	allow(ctx context.Context, subject string) (decision, error)
	charge(ctx context.Context, subject string, n int) error
}

// localLimiter keeps the logs in this process, in shards.
type localLimiter struct {
	window time.Duration
	max    int
	now    func() time.Time
	seed   maphash.Seed
	shards [64]limitShard
}

type limitShard struct {
	mu   sync.Mutex
	logs map[string][]time.Time // admissions, oldest first, at most max
	_    [40]byte               // keep shards on their own cache lines
}

func newLocalLimiter(window time.Duration, max int, now func() time.Time) *localLimiter {
	l := &localLimiter{window: window, max: max, now: now, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].logs = map[string][]time.Time{}
	}
	return l
}

// shard is subject's shard.
func (l *localLimiter) shard(subject string) *limitShard {
	return &l.shards[maphash.String(l.seed, subject)%uint64(len(l.shards))]
}

// inWindow is log less the admissions that left the window at now.
func (l *localLimiter) inWindow(log []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(log) && !log[i].After(now.Add(-l.window)) {
		i++
	}
	return log[i:]
}

func (l *localLimiter) allow(_ context.Context, subject string) (decision, error) {
	sh, now := l.shard(subject), l.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	log := l.inWindow(sh.logs[subject], now)
	if len(log) < l.max {
		log = append(log, now)
		sh.logs[subject] = log
		return decision{allowed: true, remaining: l.max - len(log)}, nil
	}
	sh.logs[subject] = log
	retry := log[0].Add(l.window).Sub(now)
	return decision{retryAfter: max(retry, time.Millisecond)}, nil
}

func (l *localLimiter) charge(_ context.Context, subject string, n int) error {
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

// sweep forgets subjects with no admission left in the window; the gateway
// calls it every window, so memory follows the subjects of one window.
func (l *localLimiter) sweep() {
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

//go:embed lua/ratelimit.lua
var rateLimitLua string

var rateLimitScript = rueidis.NewLuaScript(rateLimitLua)

//go:embed lua/charge.lua
var chargeLua string

var chargeScript = rueidis.NewLuaScript(chargeLua)

// redisLimiter shares the logs across gateways through one Lua script.
type redisLimiter struct {
	client rueidis.Client
	prefix string
	window time.Duration
	max    int
	id     string // this gateway, in members
	seq    atomic.Uint64
}

// rateLimitKey names a rate-limit key: "{prefix}:gw_ratelimit:subject"
// (package rediskey builds every key).
func rateLimitKey(prefix, subject string) string {
	return rediskey.Key(prefix, rediskey.RateLimit+subject)
}

func (l *redisLimiter) allow(ctx context.Context, subject string) (decision, error) {
	member := l.id + ":" + strconv.FormatUint(l.seq.Add(1), 36)
	vals, err := rateLimitScript.Exec(ctx, l.client, []string{rateLimitKey(l.prefix, subject)},
		[]string{strconv.FormatInt(l.window.Milliseconds(), 10), strconv.Itoa(l.max), member}).ToArray()
	if err != nil {
		return decision{}, fmt.Errorf("cannot run the rate-limit script: %w", err)
	}
	if len(vals) != 3 {
		return decision{}, errors.New("BUG: the rate-limit script answered other than 3 values")
	}
	var n [3]int64
	for i, v := range vals {
		if n[i], err = v.AsInt64(); err != nil {
			return decision{}, fmt.Errorf("cannot read the rate-limit script's answer: %w", err)
		}
	}
	if n[0] == 1 {
		return decision{allowed: true, remaining: int(n[1])}, nil
	}
	return decision{retryAfter: time.Duration(n[2]) * time.Millisecond}, nil
}

func (l *redisLimiter) charge(ctx context.Context, subject string, n int) error {
	prefix := l.id + ":" + strconv.FormatUint(l.seq.Add(1), 36)
	err := chargeScript.Exec(ctx, l.client, []string{rateLimitKey(l.prefix, subject)},
		[]string{strconv.FormatInt(l.window.Milliseconds(), 10), strconv.Itoa(l.max), strconv.Itoa(n), prefix}).Error()
	if err != nil {
		return fmt.Errorf("cannot run the rate-limit charge script: %w", err)
	}
	return nil
}
