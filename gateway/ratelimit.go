package gateway

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/rlsched/rlsched/internal/ratelimit"
	"github.com/rlsched/rlsched/internal/rediskey"
)

// The submission limit (API.md, Gateway) is package ratelimit's: this file
// adds its log in Redis, shared across gateways through one Lua script.

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

func (l *redisLimiter) Allow(ctx context.Context, subject string) (ratelimit.Decision, error) {
	member := l.id + ":" + strconv.FormatUint(l.seq.Add(1), 36)
	vals, err := rateLimitScript.Exec(ctx, l.client, []string{rateLimitKey(l.prefix, subject)},
		[]string{strconv.FormatInt(l.window.Milliseconds(), 10), strconv.Itoa(l.max), member}).ToArray()
	if err != nil {
		return ratelimit.Decision{}, fmt.Errorf("cannot run the rate-limit script: %w", err)
	}
	if len(vals) != 3 {
		return ratelimit.Decision{}, errors.New("BUG: the rate-limit script answered other than 3 values")
	}
	var n [3]int64
	for i, v := range vals {
		if n[i], err = v.AsInt64(); err != nil {
			return ratelimit.Decision{}, fmt.Errorf("cannot read the rate-limit script's answer: %w", err)
		}
	}
	if n[0] == 1 {
		return ratelimit.Decision{Allowed: true, Remaining: int(n[1])}, nil
	}
	return ratelimit.Decision{RetryAfter: time.Duration(n[2]) * time.Millisecond}, nil
}

func (l *redisLimiter) Charge(ctx context.Context, subject string, n int) error {
	prefix := l.id + ":" + strconv.FormatUint(l.seq.Add(1), 36)
	err := chargeScript.Exec(ctx, l.client, []string{rateLimitKey(l.prefix, subject)},
		[]string{strconv.FormatInt(l.window.Milliseconds(), 10), strconv.Itoa(l.max), strconv.Itoa(n), prefix}).Error()
	if err != nil {
		return fmt.Errorf("cannot run the rate-limit charge script: %w", err)
	}
	return nil
}
