package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/auth"
	"github.com/rlsched/rlsched/internal/clip"
	"github.com/rlsched/rlsched/internal/crosssite"
	"github.com/rlsched/rlsched/live"
)

// GET /ws: API.md's WebSocket, a thin transport over live.Hub. Each
// connection is one hub Subscriber: the read loop (the hijacked connection's
// goroutine) answers ops by queueing frames on it, and one writer goroutine
// drains the queue onto the socket, sending pings between. Nothing here
// blocks the hub's publishers; a client too slow for its queue is skipped
// ahead by the hub (`lagged`), one too slow for its socket is cut off by the
// write deadline.

const (
	// wsReadLimit bounds one client message; ops are small.
	wsReadLimit = 4 << 10
	// wsWriteTimeout bounds writing one frame to the socket.
	wsWriteTimeout = 15 * time.Second
	// defaultWSPing is how often the server pings; a client silent for
	// 2.5 times that (no pong, no message) is disconnected.
	defaultWSPing = 25 * time.Second
	// wsRecheck is how often an open WebSocket's user is read again (at
	// most; the ping interval when shorter): a user disabled, deleted or
	// signed out stops receiving within it, as their next REST request
	// would be refused.
	wsRecheck = 5 * time.Second
)

const (
	codeUpgradeRequired      = "upgrade_required"
	codeTooManySubscriptions = "too_many_subscriptions"
)

// ws authenticates the request (Authorization: Bearer, ?token=, or the
// jwt_token cookie) and upgrades it; every refusal is an HTTP answer
// before the upgrade.
func (s *Server) ws(r *request) *apiError {
	hub := s.cfg.Hub
	if hub == nil {
		return &apiError{fasthttp.StatusServiceUnavailable, codeUnavailable,
			"live updates are off on this master; poll the REST API instead"}
	}
	u, e := s.wsAdmit(r)
	if e != nil {
		return e
	}
	ctx := r.ctx
	trace := r.trace
	shutdown := ctx.Done() // closed by the server's Shutdown
	up := s.wsUpgrader(trace)
	// On failure the upgrader has answered through Error.
	_ = up.Upgrade(ctx, func(conn *websocket.Conn) {
		s.serveWS(conn, hub, u, trace, shutdown)
	})
	return nil
}

// wsAdmit authenticates a WebSocket request (Authorization: Bearer,
// ?token=, or the jwt_token cookie) and checks that it is an upgrade from
// this site when signed in by cookie: every refusal is an HTTP answer
// before the upgrade. It sets r.user.
func (s *Server) wsAdmit(r *request) (core.User, *apiError) {
	ctx := r.ctx
	// Browsers cannot set headers on a WebSocket: ?token= stands in for
	// Authorization.
	_, src := auth.FromRequest(&ctx.Request, true)
	viaCookie := src == auth.Cookie
	u, e := s.authenticate(r, true)
	if e != nil {
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="rlsched"`)
		return u, e
	}
	r.user = u
	if !websocket.FastHTTPIsWebSocketUpgrade(ctx) {
		ctx.Response.Header.Set("Upgrade", "websocket")
		return u, &apiError{fasthttp.StatusUpgradeRequired, codeUpgradeRequired,
			"this path speaks WebSocket only; connect with a WebSocket client"}
	}
	// A cookie comes along with any page's request; only pages of this
	// site may use it (a token proves itself).
	if viaCookie && !wsSameOrigin(r) {
		return u, &apiError{fasthttp.StatusForbidden, codeForbidden,
			"a WebSocket signed in by cookie must come from this site's pages; send ?token= instead"}
	}
	return u, nil
}

// wsUpgrader upgrades an admitted request (wsAdmit checked the origin).
func (s *Server) wsUpgrader(trace string) websocket.FastHTTPUpgrader {
	return websocket.FastHTTPUpgrader{
		HandshakeTimeout: 10 * time.Second,
		CheckOrigin:      func(*fasthttp.RequestCtx) bool { return true }, // checked above
		Error: func(ctx *fasthttp.RequestCtx, status int, reason error) {
			code := codeBadRequest
			if status == fasthttp.StatusForbidden {
				code = codeForbidden
			}
			writeError(ctx, trace, &apiError{status, code, reason.Error()})
		},
	}
}

// wsSameOrigin: no Origin (not a browser), or the Origin is the site the
// request was sent to (directly, or through the gateway: internal/crosssite).
func wsSameOrigin(r *request) bool {
	origin := string(r.ctx.Request.Header.Peek("Origin"))
	return origin == "" || crosssite.SameOrigin(origin, r.site())
}

func (s *Server) wsPing() time.Duration {
	if s.cfg.WSPingInterval > 0 {
		return s.cfg.WSPingInterval
	}
	return defaultWSPing
}

// serveWS runs one connection: this goroutine reads, a second writes.
func (s *Server) serveWS(conn *websocket.Conn, hub *live.Hub, u core.User, trace string, shutdown <-chan struct{}) {
	log := s.log.With().Str("traceId", trace).Int64("userId", u.ID).Logger()
	sub := hub.NewSubscriber(u)
	stop := make(chan struct{})
	writerDone := make(chan struct{})
	defer func() {
		if p := recover(); p != nil {
			log.Error().Str("panic", fmt.Sprint(p)).Bytes("stack", debug.Stack()).Msg("BUG: WebSocket reader panicked")
		}
		close(stop)
		_ = conn.Close() // unblocks a write to a peer that is gone
		<-writerDone
		sub.Close()
	}()

	ping := s.wsPing()
	idle := ping * 5 / 2
	conn.SetReadLimit(wsReadLimit)
	_ = conn.SetReadDeadline(time.Now().Add(idle))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(idle)) })
	go s.wsWrite(conn, sub, ping, stop, shutdown, writerDone, log)
	go s.wsRevoke(conn, u, min(ping, wsRecheck), stop, log)

	for {
		typ, msg, err := conn.ReadMessage()
		if err != nil {
			return
		}
		_ = conn.SetReadDeadline(time.Now().Add(idle))
		if err := s.wsHandle(sub, typ, msg); err != nil {
			// The client sends but does not read: let it go.
			log.Info().Err(err).Msg("closing a WebSocket")
			return
		}
	}
}

// wsRevoke closes the connection once its user's sign-in no longer holds
// (disabled, deleted, signed out, a new role or password: currentUser's
// rules), with 1008 and the reason. A store that does not answer keeps the
// connection, as it keeps the REST requests it cannot check. It uses only
// WriteControl and Close, which the library allows beside the writer.
func (s *Server) wsRevoke(conn *websocket.Conn, u core.User, every time.Duration, stop <-chan struct{}, log zerolog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		_, e := s.currentUser(u.ID, u.TokenVersion)
		if e == nil || e.Status == fasthttp.StatusServiceUnavailable {
			continue
		}
		log.Info().Str("why", e.Message).Msg("closing a WebSocket: its sign-in no longer holds")
		reason := e.Message
		if len(reason) > 120 { // a close frame's reason is at most 123 bytes
			reason = reason[:120]
		}
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.ClosePolicyViolation, reason),
			time.Now().Add(time.Second))
		_ = conn.Close()
		return
	}
}

// wsWrite is the connection's only writer of data frames (the library
// allows control frames from the reader beside it). It returns when the
// reader stops, the server shuts down or a write fails, closing the socket
// so the reader stops too.
func (s *Server) wsWrite(conn *websocket.Conn, sub *live.Subscriber, ping time.Duration,
	stop, shutdown <-chan struct{}, done chan<- struct{}, log zerolog.Logger) {
	defer close(done)
	defer func() {
		if p := recover(); p != nil {
			log.Error().Str("panic", fmt.Sprint(p)).Bytes("stack", debug.Stack()).Msg("BUG: WebSocket writer panicked")
		}
		_ = conn.Close()
	}()
	t := time.NewTicker(ping)
	defer t.Stop()
	var frames [][]byte
	for {
		select {
		case <-stop:
			return
		case <-shutdown:
			_ = conn.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseGoingAway, "server shutting down"),
				time.Now().Add(time.Second))
			return
		case <-t.C:
			if conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(wsWriteTimeout)) != nil {
				return
			}
		case <-sub.Ready():
			frames = sub.Drain(frames[:0])
			for _, f := range frames {
				_ = conn.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
				if conn.WriteMessage(websocket.TextMessage, f) != nil {
					return
				}
			}
			clear(frames) // the frames are shared; do not keep them alive
		}
	}
}

// wsOp is a client message.
type wsOp struct {
	Op     string `json:"op"`
	Topic  string `json:"topic"`
	Offset *int64 `json:"offset"`
}

type wsErrorFrame struct {
	Type  string        `json:"type"`
	Topic string        `json:"topic,omitempty"`
	Error wsErrorDetail `json:"error"`
}

type wsErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// wsHandle answers one client message. Its error means the connection must
// close (the queue is full or closed); a bad message gets an error frame.
func (s *Server) wsHandle(sub *live.Subscriber, typ int, msg []byte) error {
	fail := func(topic, code, format string, args ...any) error {
		b, _ := json.Marshal(wsErrorFrame{"error", topic, wsErrorDetail{code, fmt.Sprintf(format, args...)}})
		return sub.Send(b)
	}
	if typ != websocket.TextMessage {
		return fail("", codeBadRequest, "send JSON text frames, e.g. {\"op\":\"subscribe\",\"topic\":\"/topic/tasks\"}")
	}
	var op wsOp
	if e := decodeJSON(msg, &op); e != nil {
		return fail("", e.Code, "%s", e.Message)
	}
	topic := clip.String(op.Topic, 200)
	switch op.Op {
	case "subscribe":
		return s.wsSubscribe(sub, op, fail)
	case "unsubscribe":
		if _, _, err := live.ParseTopic(op.Topic); err != nil {
			return fail(topic, codeBadRequest, "%v", err)
		}
		return sub.Unsubscribe(op.Topic)
	case "":
		return fail(topic, codeBadRequest, "missing op: use subscribe or unsubscribe")
	}
	return fail(topic, codeBadRequest, "unknown op %q: use subscribe or unsubscribe", clip.String(op.Op, 64))
}

func (s *Server) wsSubscribe(sub *live.Subscriber, op wsOp, fail func(topic, code, format string, args ...any) error) error {
	topic := clip.String(op.Topic, 200)
	kind, id, err := live.ParseTopic(op.Topic)
	if err != nil {
		return fail(topic, codeBadRequest, "%v", err)
	}
	var o live.SubscribeOptions
	if op.Offset != nil {
		if *op.Offset < 0 {
			return fail(topic, codeBadRequest, "offset must be a byte offset ≥ 0")
		}
		o.Offset = *op.Offset
	}
	if kind == live.TopicKindLogs {
		ctx, cancel := storeCtx()
		t, err := s.st.Task(ctx, id)
		cancel()
		if err != nil {
			e := storeError(err, "run "+id)
			return fail(topic, e.Code, "%s", e.Message)
		}
		o.RunEnded = t.Status.Terminal()
	}
	switch err := sub.Subscribe(op.Topic, o); {
	case err == nil:
		return nil
	case errors.Is(err, live.ErrTooManySubscriptions):
		return fail(topic, codeTooManySubscriptions, "%v; unsubscribe from another topic first", err)
	case errors.Is(err, live.ErrQueueFull), errors.Is(err, live.ErrClosed):
		return err
	default:
		return fail(topic, codeBadRequest, "%v", err)
	}
}
