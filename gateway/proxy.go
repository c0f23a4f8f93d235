package gateway

import (
	"bytes"
	"errors"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/internal/apierr"
	"github.com/rlsched/rlsched/internal/obs"
)

// streamThreshold: a response body longer than this (or of unknown length)
// is streamed under the idle deadline instead of the header deadline.
const streamThreshold = 64 << 10

// hopHeaders are hop-by-hop (RFC 9110 7.6.1): never forwarded. Connection's
// own tokens are removed too.
var hopHeaders = [...]string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"TE", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHop deletes the hop-by-hop headers and those Connection names.
func removeHop(peek func(string) []byte, del func(string)) {
	if c := peek("Connection"); len(c) > 0 {
		for _, tok := range bytes.Split(c, []byte{','}) {
			tok = bytes.TrimSpace(tok)
			if len(tok) > 0 && !bytes.EqualFold(tok, []byte("close")) && !bytes.EqualFold(tok, []byte("keep-alive")) &&
				!bytes.EqualFold(tok, []byte("upgrade")) {
				del(string(tok))
			}
		}
	}
	for _, k := range hopHeaders {
		del(k)
	}
}

// forwardedHeaders adds X-Forwarded-For/-Host/-Proto for the upstream;
// X-Forwarded-Host is the client's Host, which the signature covers.
// ip is the client's address (ctx.RemoteIP), formatted once for this and
// the signature.
func forwardedHeaders(ctx *fasthttp.RequestCtx, ip string) {
	h := &ctx.Request.Header
	if prior := h.Peek("X-Forwarded-For"); len(prior) > 0 {
		h.Set("X-Forwarded-For", string(prior)+", "+ip)
	} else {
		h.Set("X-Forwarded-For", ip)
	}
	h.SetBytesV("X-Forwarded-Host", h.Host())
	if ctx.IsTLS() {
		h.Set("X-Forwarded-Proto", "https")
	} else {
		h.Set("X-Forwarded-Proto", "http")
	}
}

// appHeaderTimeout bounds the wait for a session's web app's answer
// headers (issue 34): the app is the run's code, which may take long over
// a request (a notebook saving a large file); the master bounds it the
// same (httpapi's appTimeout).
const appHeaderTimeout = 5 * time.Minute

// headerTimeout is how long st's request waits for the answer's headers.
func (g *Gateway) headerTimeout(st *reqState) time.Duration {
	if st.kind == pathApp {
		return max(g.cfg.UpstreamTimeout, appHeaderTimeout)
	}
	return g.cfg.UpstreamTimeout
}

func idempotent(method []byte) bool {
	switch string(method) {
	case "GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE":
		return true
	}
	return false
}

// proxy forwards the request to an upstream and the answer back: the
// request line and body as the client sent them, hop-by-hop headers
// removed. A connection that could not be made is retried on another
// instance for any method (nothing was sent); other failures only for
// idempotent methods (every body is in memory), within UpstreamTimeout
// overall.
// When no attempt answers: the fallback.
func (g *Gateway) proxy(ctx *fasthttp.RequestCtx, st *reqState) {
	req := &ctx.Request
	clientClose := req.Header.ConnectionClose()
	removeHop(req.Header.Peek, req.Header.Del)
	req.Header.Del("Expect") // 100-continue was this hop's business, done
	req.UseHostHeader = true

	retryAny := idempotent(req.Header.Method())

	deadline := time.Now().Add(g.headerTimeout(st))
	var tried [4]*upstream
	ntried := 0
	var lastErr error
	timedOut := false
	stale := 0
	table := g.routes.Load()
attempts:
	for attempt := 0; attempt < g.cfg.MaxAttempts && ntried < len(tried); attempt++ {
		up := table.pick(st.canary, g.rr.Add(1), time.Now().UnixNano(), tried[:ntried])
		if up == nil {
			break
		}
		tried[ntried] = up
		ntried++
		remaining := time.Until(deadline)
		if remaining <= 0 {
			timedOut = true
			break
		}
		ctx.Response.StreamBody = true
		// The master's own name, as a plain proxy sends it; the client's
		// is in the signed X-Forwarded-Host.
		req.Header.SetHost(up.host)
		sent := time.Now()
		err := up.hc.DoTimeout(req, &ctx.Response, remaining)
		if err == nil {
			g.observe(up, 0)
			up.met.Attempt(obs.AttemptOK, time.Since(sent))
			st.up = up
			g.finishResponse(ctx, up)
			if clientClose {
				ctx.SetConnectionClose()
			}
			return
		}
		lastErr = err
		var de *dialError
		switch {
		case errors.As(err, new(staleConnError)):
			// An idle connection the upstream had closed: nothing was sent.
			// Not the instance's fault (idle timeouts, a restart); if it is
			// down, the next connection will be refused.
			up.met.Attempt(obs.AttemptStaleConn, time.Since(sent))
			up.hc.CloseIdleConnections() // its other idle ones are likely stale too
			tried[ntried-1] = nil        // it may be tried again
			ntried--
			attempt-- // does not count
			if stale++; stale > 4 {
				break attempts
			}
			continue
		case errors.Is(err, fasthttp.ErrNoFreeConns):
			// This gateway's pool to it is full: not the instance's fault,
			// and nothing was sent.
			up.met.Attempt(obs.AttemptPoolFull, time.Since(sent))
			continue
		case errors.As(err, &de):
			up.hc.CloseIdleConnections()
			g.observe(up, failConnect)
			up.met.Attempt(obs.AttemptConnectError, time.Since(sent))
			continue // nothing was sent: any method may go elsewhere
		case isTimeout(err):
			g.observe(up, failError)
			up.met.Attempt(obs.AttemptTimeout, time.Since(sent))
			timedOut = true
		default:
			g.observe(up, failError)
			up.met.Attempt(obs.AttemptError, time.Since(sent))
		}
		if timedOut || !retryAny {
			break
		}
	}
	ctx.Response.Reset()
	if clientClose {
		ctx.SetConnectionClose()
	}
	if ntried > 0 {
		st.up = tried[ntried-1]
	}
	ev := g.log.Warn().Str("traceId", st.trace).Int("attempts", ntried).Bool("timeout", timedOut)
	if lastErr != nil {
		ev = ev.AnErr("reason", lastErr)
	}
	if ntried == 0 {
		ev = ev.Str("reason", "no upstream instance")
	}
	ev.Msg("no upstream answered")
	g.unavailable(ctx, st, timedOut)
}

// unavailable answers when no upstream did: API.md's fallback, or 502/504.
func (g *Gateway) unavailable(ctx *fasthttp.RequestCtx, st *reqState, timedOut bool) {
	g.obs.Fallback()
	switch {
	case !g.cfg.FallbackDisabled:
		apierr.WriteFallback(ctx, st.trace)
	case timedOut:
		writeError(ctx, st.trace, fasthttp.StatusGatewayTimeout, apierr.GatewayTimeout, "the upstream did not answer in time")
	default:
		writeError(ctx, st.trace, fasthttp.StatusBadGateway, apierr.BadGateway, "no upstream could be reached")
	}
}

// finishResponse cleans the upstream's response for the client.
func (g *Gateway) finishResponse(ctx *fasthttp.RequestCtx, up *upstream) {
	rh := &ctx.Response.Header
	removeHop(rh.Peek, rh.Del)
	if ctx.Response.IsBodyStream() {
		if cl := rh.ContentLength(); cl < 0 || cl > streamThreshold {
			up.conns.stream(ctx.Response.LocalAddr(), g.cfg.StreamIdleTimeout)
		}
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrDialTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
