package httpapi

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/internal/apierr"
	"github.com/rlsched/rlsched/internal/ratelimit"
	"github.com/rlsched/rlsched/internal/signature"
)

// The submission limit at the master (issue 25; docs/deploy.md, RATE_LIMIT_*):
// the gateway's limit (package ratelimit) for what reaches this master
// without the gateway's signature, so that its port is no way around it.
// What the gateway signed it has limited already: counting it again here
// would refuse ordinary use twice over, a little earlier than the gateway
// does (the two windows start at different instants). The subject is the
// signed-in user; every route that queues runs (route.queues) takes one
// admission, and an accepted one that queued several (a sweep, a pipeline, a
// retry) is charged its other runs too, as the gateway charges them from
// signature.HeaderRunsQueued. Like the gateway's, an attempt counts whatever
// its answer. The log lives in this master's memory: with several masters,
// a user gets that many per master (docs/security.md).

// submitLimit is a master's limiter; nil when RATE_LIMIT_ENABLED is off.
type submitLimit struct {
	max    int
	window time.Duration
	log    *ratelimit.Local
	mu     sync.Mutex
	swept  time.Time
	now    func() time.Time
}

func newSubmitLimit(max int, window time.Duration, now func() time.Time) *submitLimit {
	if max <= 0 || window <= 0 {
		return nil
	}
	return &submitLimit{max: max, window: window, log: ratelimit.NewLocal(window, max, now), now: now, swept: now()}
}

// applies: r is limited here (a route that queues runs, not signed by the
// gateway).
func (l *submitLimit) applies(r *request) bool {
	return l != nil && r.rt != nil && r.rt.queues && !r.gw.signed && r.user.ID != 0
}

// subject is r's user in the log.
func subject(r *request) string { return "user:" + strconv.FormatInt(r.user.ID, 10) }

// admit takes one admission for r, or answers the 429.
func (l *submitLimit) admit(r *request) *apiError {
	if !l.applies(r) {
		return nil
	}
	l.sweep()
	d, _ := l.log.Allow(context.Background(), subject(r))
	h := &r.ctx.Response.Header
	h.Set("X-RateLimit-Limit", strconv.Itoa(l.max))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(max(d.Remaining, 0)))
	if d.Allowed {
		return nil
	}
	secs := max(int((d.RetryAfter+time.Second-1)/time.Second), 1)
	h.Set("Retry-After", strconv.Itoa(secs))
	return &apiError{fasthttp.StatusTooManyRequests, apierr.RateLimited,
		"too many submissions: at most " + strconv.Itoa(l.max) + " per " + l.window.String() +
			" (RATE_LIMIT_MAX_REQUESTS, RATE_LIMIT_WINDOW_SECONDS); retry after " + strconv.Itoa(secs) + " s"}
}

// charge counts the runs beyond the first that r's accepted answer queued.
func (l *submitLimit) charge(r *request) {
	if !l.applies(r) || r.ctx.Response.StatusCode() != fasthttp.StatusAccepted {
		return
	}
	if n, err := strconv.Atoi(string(r.ctx.Response.Header.Peek(signature.HeaderRunsQueued))); err == nil && n > 1 {
		_ = l.log.Charge(context.Background(), subject(r), n-1)
	}
}

// sweep forgets idle users once a window, so memory follows one window's.
func (l *submitLimit) sweep() {
	l.mu.Lock()
	now := l.now()
	due := now.Sub(l.swept) >= l.window
	if due {
		l.swept = now
	}
	l.mu.Unlock()
	if due {
		l.log.Sweep()
	}
}
