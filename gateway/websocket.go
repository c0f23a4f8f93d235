package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/rlsched/rlsched/internal/obs"
	"github.com/valyala/fasthttp"
)

// WebSocket upgrades are tunnelled byte for byte (as nginx does): the
// upgrade request goes to an upstream with the signed identity; a refusal
// (401, 403, 426...) comes back as an ordinary answer; a 101 is relayed and
// both connections are joined. Frames, pings, compression and the close
// handshake pass through untouched, so close codes propagate both ways; when
// one side ends, the other is half-closed and, after wsCloseGrace, closed.

const (
	wsCloseGrace    = 5 * time.Second
	wsMaxRefusalLen = 1 << 20
)

// tunnel is one proxied WebSocket: the client's hijacked connection and the
// upstream's.
type tunnel struct {
	client, upstream net.Conn
	mu               sync.Mutex
	closed           bool
}

func (t *tunnel) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.closed = true
	if t.client != nil {
		_ = t.client.Close()
	}
	_ = t.upstream.Close()
}

func (g *Gateway) proxyWebSocket(ctx *fasthttp.RequestCtx, st *reqState) {
	req := &ctx.Request
	removeHop(req.Header.Peek, req.Header.Del)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")

	deadline := time.Now().Add(g.cfg.UpstreamTimeout)
	var tried [4]*upstream
	ntried := 0
	timedOut := false
	var lastErr error
	table := g.routes.Load()
	var head []byte
	for attempt := 0; attempt < g.cfg.MaxAttempts && ntried < len(tried); attempt++ {
		up := table.pick(st.canary, g.rr.Add(1), time.Now().UnixNano(), tried[:ntried])
		if up == nil {
			break
		}
		tried[ntried] = up
		ntried++
		if time.Until(deadline) <= 0 {
			timedOut = true
			break
		}
		sent := time.Now()
		d := net.Dialer{Deadline: deadline, KeepAlive: 30 * time.Second}
		conn, err := d.Dial("tcp", up.addr)
		if err != nil {
			lastErr = err
			g.observe(up, failConnect)
			up.met.Attempt(obs.AttemptConnectError, time.Since(sent))
			continue
		}
		_ = conn.SetDeadline(deadline)
		req.Header.SetHost(up.host) // as proxy does
		head = req.Header.AppendBytes(head[:0])
		resp := fasthttp.AcquireResponse()
		br := bufio.NewReaderSize(conn, 4096)
		if _, err = conn.Write(head); err == nil {
			err = resp.ReadLimitBody(br, wsMaxRefusalLen)
		}
		if err != nil {
			fasthttp.ReleaseResponse(resp)
			_ = conn.Close()
			lastErr = err
			g.observe(up, failError)
			if isTimeout(err) {
				up.met.Attempt(obs.AttemptTimeout, time.Since(sent))
				timedOut = true
				break
			}
			up.met.Attempt(obs.AttemptError, time.Since(sent))
			continue // the upgrade is a GET: idempotent
		}
		g.observe(up, 0)
		up.met.Attempt(obs.AttemptOK, time.Since(sent))
		st.up = up
		if resp.StatusCode() != fasthttp.StatusSwitchingProtocols {
			resp.CopyTo(&ctx.Response)
			fasthttp.ReleaseResponse(resp)
			_ = conn.Close()
			removeHop(ctx.Response.Header.Peek, ctx.Response.Header.Del)
			return
		}
		g.upgrade(ctx, st, resp, conn, br)
		fasthttp.ReleaseResponse(resp)
		return
	}
	if ntried > 0 {
		st.up = tried[ntried-1]
	}
	g.log.Warn().Str("traceId", st.trace).Int("attempts", ntried).AnErr("reason", lastErr).Msg("no upstream accepted the WebSocket")
	g.unavailable(ctx, st, timedOut)
}

// upgrade relays the upstream's 101 and joins the two connections.
func (g *Gateway) upgrade(ctx *fasthttp.RequestCtx, st *reqState, resp *fasthttp.Response, conn net.Conn, br *bufio.Reader) {
	t := &tunnel{upstream: conn}
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		_ = conn.Close()
		g.unavailable(ctx, st, false)
		return
	}
	g.tunnels[t] = struct{}{}
	g.mu.Unlock()

	ctx.Response.Reset()
	resp.Header.CopyTo(&ctx.Response.Header)
	removeHop(ctx.Response.Header.Peek, ctx.Response.Header.Del)
	ctx.Response.Header.Set("Connection", "Upgrade")
	ctx.Response.Header.Set("Upgrade", "websocket")
	ctx.SetStatusCode(fasthttp.StatusSwitchingProtocols)
	_ = conn.SetDeadline(time.Time{})
	// Frames the upstream sent right behind its 101.
	var pending []byte
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		pending = append(pending, b...)
	}
	trace, upURL := st.trace, st.up.URL
	g.log.Info().Str("traceId", trace).Str("upstream", upURL).Msg("websocket opened")
	ctx.Hijack(func(c net.Conn) {
		g.obs.WebSocketOpened()
		defer g.obs.WebSocketClosed()
		t.mu.Lock()
		closed := t.closed
		t.client = c
		t.mu.Unlock()
		defer func() {
			t.close()
			g.mu.Lock()
			delete(g.tunnels, t)
			g.mu.Unlock()
			g.log.Info().Str("traceId", trace).Str("upstream", upURL).Msg("websocket closed")
		}()
		if closed {
			return
		}
		if len(pending) > 0 {
			if _, err := c.Write(pending); err != nil {
				return
			}
		}
		g.pipe(t, c, conn)
	})
}

// pipe copies both ways until both directions end, or one fails; a
// direction that ends cleanly half-closes the other side, which then has
// wsCloseGrace to finish its close handshake.
func (g *Gateway) pipe(t *tunnel, client, upstream net.Conn) {
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(upstream, client)
		closeWrite(upstream)
		done <- err
	}()
	go func() {
		_, err := io.Copy(client, upstream)
		closeWrite(client)
		done <- err
	}()
	err := <-done
	if err != nil && !errors.Is(err, net.ErrClosed) {
		t.close()
	}
	select {
	case <-done:
		// Both copies ended: a further receive would wait forever.
		t.close()
		return
	case <-time.After(wsCloseGrace):
	}
	t.close()
	<-done
}

// closeWrite half-closes c when it can (TCP), so the peer sees EOF while the
// other direction may still deliver the close handshake.
func closeWrite(c net.Conn) {
	type closeWriter interface{ CloseWrite() error }
	for {
		switch v := c.(type) {
		case closeWriter:
			_ = v.CloseWrite()
			return
		case interface{ UnsafeConn() net.Conn }: // fasthttp's hijacked conn
			c = v.UnsafeConn()
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return
		}
	}
}

// CloseWrite lets the tunnel half-close a client connection.
func (c *idleConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
