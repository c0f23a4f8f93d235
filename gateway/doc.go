// Package gateway is rlsched's HTTP front door (API.md, Gateway): a fasthttp
// reverse proxy in front of several masters, stable and canary, found in a
// static list or through Nacos (package discovery).
//
// Every request passes the filters in this order: trace id (X-Trace-Id, kept
// or made); identity headers a client sent are stripped; JWT (HS256 pinned,
// expiry required, from Authorization, the jwt_token cookie, or ?token= on
// /ws; browsers are redirected to /login); the submission rate limit (POST
// /api/train, per verified user else per client IP, in this process or
// shared through Redis); the canary choice; the signed identity
// (X-User-*, X-Gateway-Timestamp, X-Gateway-Signature, see package
// signature); then the proxy: keep-alive pools per upstream, health checks
// and outlier ejection, retries for idempotent requests only, bodies
// streamed, WebSocket upgrades tunnelled, and the fallback 503 when no
// upstream answers in time.
//
// It never trusts a client for identity (only a token it verified), never
// retries a request an upstream may have acted on unless the method is
// idempotent, and never buffers a large body: bodies beyond the buffering
// limit stream through.
package gateway
