package gateway

import (
	"context"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/internal/apierr"
	"github.com/rlsched/rlsched/internal/obs"
)

// redisTimeout bounds one rate-limit call to Redis; past it the local log
// decides.
const redisTimeout = 500 * time.Millisecond

// rateLimit applies the submission limit; false means it answered 429.
func (g *Gateway) rateLimit(ctx *fasthttp.RequestCtx, st *reqState) bool {
	subject := "ip:" + ctx.RemoteIP().String()
	if st.verified {
		subject = "user:" + st.user.id
	}
	rctx, cancel := context.WithTimeout(context.Background(), redisTimeout)
	d, err := g.limiter.Allow(rctx, subject)
	cancel()
	if err != nil {
		// Redis is down or slow: limit in this process rather than not at
		// all, and say so (at most every 10 s).
		g.obs.RateLimitError()
		if now := time.Now().UnixNano(); now-g.redisWarned.Load() > int64(10*time.Second) {
			g.redisWarned.Store(now)
			g.log.Warn().Err(err).Str("traceId", st.trace).Msg("rate limit: Redis failed; limiting in this gateway alone until it answers")
		}
		d, _ = g.local.Allow(rctx, subject)
	}
	// The headers are set by finish, after the upstream's answer.
	st.limited, st.remaining, st.subject = true, max(d.Remaining, 0), subject
	if d.Allowed {
		return true
	}
	rh := &ctx.Response.Header
	secs := int((d.RetryAfter + time.Second - 1) / time.Second)
	rh.Set("Retry-After", strconv.Itoa(max(secs, 1)))
	g.obs.RateLimited()
	writeError(ctx, st.trace, fasthttp.StatusTooManyRequests, apierr.RateLimited,
		"too many submissions: at most "+strconv.Itoa(g.cfg.RateLimitMax)+" per "+g.cfg.RateLimitWindow.String()+
			"; retry after "+strconv.Itoa(max(secs, 1))+" s")
	return false
}

// chooseCanary decides whether the request goes to a canary (API.md): the
// X-Canary: true header, a verified user in CANARY_USER_IDS, or the stable
// percentage on the verified user id (else the trace id). A client-sent
// X-User-Id plays no part: only the verified identity counts.
func (g *Gateway) chooseCanary(ctx *fasthttp.RequestCtx, st *reqState) (bool, obs.CanaryReason) {
	if v := ctx.Request.Header.Peek("X-Canary"); len(v) == 4 && (string(v) == "true" || string(v) == "True" || string(v) == "TRUE") {
		return true, obs.CanaryHeader
	}
	if st.verified && g.canaryUsers[st.user.id] {
		return true, obs.CanaryUser
	}
	if p := g.cfg.CanaryPercent; p > 0 {
		key := st.trace
		if st.verified {
			key = st.user.id
		}
		if canaryBucket(key) < uint32(p) {
			return true, obs.CanaryPercent
		}
	}
	return false, 0
}

// canaryBucket is a stable hash of key mod 100 (FNV-1a), the same on every
// gateway and across restarts.
func canaryBucket(key string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h % 100
}
