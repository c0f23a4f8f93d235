package gateway_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/gateway"
	"github.com/rlsched/rlsched/gateway/discovery"
)

// echoWS is a tiny WebSocket upstream on /ws: it greets, echoes every
// message, answers "close-4002" by closing with code 4002, and reports the
// close code each client sent and the identity the gateway signed.
type echoWS struct {
	url     string
	closes  chan int    // close codes received from clients
	idents  chan string // X-User-Id of each upgrade
	refused chan struct{}
}

func newEchoWS(t testing.TB) *echoWS {
	e := &echoWS{closes: make(chan int, 8), idents: make(chan string, 8), refused: make(chan struct{}, 8)}
	up := websocket.FastHTTPUpgrader{CheckOrigin: func(*fasthttp.RequestCtx) bool { return true }}
	e.url = upstream(t, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) != "/ws" {
			return // health checks
		}
		if string(ctx.QueryArgs().Peek("refuse")) == "1" {
			e.refused <- struct{}{}
			ctx.Error(`{"error":{"code":"forbidden"}}`, fasthttp.StatusForbidden)
			return
		}
		e.idents <- string(ctx.Request.Header.Peek("X-User-Id"))
		_ = up.Upgrade(ctx, func(c *websocket.Conn) {
			defer c.Close()
			if err := c.WriteMessage(websocket.TextMessage, []byte("welcome")); err != nil {
				return
			}
			for {
				mt, msg, err := c.ReadMessage()
				if err != nil {
					var ce *websocket.CloseError
					if errors.As(err, &ce) {
						e.closes <- ce.Code
					} else {
						e.closes <- -1
					}
					return
				}
				if string(msg) == "close-4002" {
					_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4002, "bye"), time.Now().Add(time.Second))
					// Wait for the client's close reply, as the protocol asks.
					_, _, _ = c.ReadMessage()
					return
				}
				if err := c.WriteMessage(mt, msg); err != nil {
					return
				}
			}
		})
	})
	return e
}

func TestWebSocketThroughGateway(t *testing.T) {
	echo := newEchoWS(t)
	_, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour}, []string{echo.url}, nil)
	wsURL := "ws" + strings.TrimPrefix(gwURL, "http") + "/ws"
	tok := testToken(t, 7, "bob", "USER")
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}

	dial := func(t *testing.T, url string, h http.Header) *websocket.Conn {
		t.Helper()
		c, resp, err := d.Dial(url, h)
		if err != nil {
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			t.Fatalf("dial %s: %v (status %d)", url, err, status)
		}
		if got := resp.Header.Get("X-Upstream-Service"); got != discovery.ServiceStable {
			t.Errorf("X-Upstream-Service %q on the 101", got)
		}
		if got := <-echo.idents; got != "7" {
			t.Errorf("the upstream saw X-User-Id %q, want the verified 7", got)
		}
		return c
	}
	read := func(t *testing.T, c *websocket.Conn, want string) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, msg, err := c.ReadMessage()
		if err != nil || string(msg) != want {
			t.Fatalf("read %q, %v; want %q", msg, err, want)
		}
	}

	t.Run("both directions, client closes", func(t *testing.T) {
		c := dial(t, wsURL+"?token="+tok, nil)
		read(t, c, "welcome")
		for _, m := range []string{"hello", strings.Repeat("x", 200<<10), "again"} {
			if err := c.WriteMessage(websocket.TextMessage, []byte(m)); err != nil {
				t.Fatal(err)
			}
			read(t, c, m)
		}
		if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(4001, "done")); err != nil {
			t.Fatal(err)
		}
		select {
		case code := <-echo.closes:
			if code != 4001 {
				t.Fatalf("the upstream saw close code %d, want 4001", code)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the client's close never reached the upstream")
		}
		c.Close()
	})

	t.Run("upstream closes", func(t *testing.T) {
		h := http.Header{}
		h.Set("Authorization", "Bearer "+tok)
		c := dial(t, wsURL, h)
		defer c.Close()
		read(t, c, "welcome")
		if err := c.WriteMessage(websocket.TextMessage, []byte("close-4002")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _, err := c.ReadMessage()
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != 4002 || ce.Text != "bye" {
			t.Fatalf("read %v, want the upstream's close 4002 bye", err)
		}
	})

	t.Run("refusals are HTTP answers", func(t *testing.T) {
		_, resp, err := d.Dial(wsURL, nil)
		if err == nil || resp == nil || resp.StatusCode != 401 {
			t.Fatalf("without a token: %v %v", err, resp)
		}
		_, resp, err = d.Dial(wsURL+"?refuse=1&token="+tok, nil)
		if err == nil || resp == nil || resp.StatusCode != 403 {
			t.Fatalf("refused upstream: %v %v", err, resp)
		}
		<-echo.refused
	})
}

func TestWebSocketClosedOnShutdown(t *testing.T) {
	echo := newEchoWS(t)
	g, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour}, []string{echo.url}, nil)
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(gwURL, "http")+"/ws?token="+testToken(t, 7, "bob", "USER"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-echo.idents
	done := make(chan error, 1)
	go func() { done <- g.Shutdown() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown waited on an open WebSocket")
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			break // closed: the greeting may come first
		}
	}
	select {
	case <-echo.closes:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream connection stayed open after Shutdown")
	}
}
