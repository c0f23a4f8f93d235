package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/apierr"
	"github.com/rlsched/rlsched/internal/auth"
	"github.com/rlsched/rlsched/internal/clip"
	"github.com/rlsched/rlsched/internal/crosssite"
	"github.com/rlsched/rlsched/internal/linger"
	"github.com/rlsched/rlsched/internal/obs"
	"github.com/rlsched/rlsched/internal/ratelimit"
	"github.com/rlsched/rlsched/internal/rediskey"
	"github.com/rlsched/rlsched/internal/signature"
)

// Gateway is the proxy. Handler, Serve, Shutdown and SetInstances are safe to
// call from any goroutine.
type Gateway struct {
	cfg         Config
	log         zerolog.Logger
	tokens      *auth.Tokens
	hosts       crosssite.Hosts
	signer      *signature.Signer
	limiter     ratelimit.Limiter // nil when the rate limit is off
	local       *ratelimit.Local  // the local log; also the fallback when Redis fails
	canaryUsers map[string]bool
	obs         *obs.GatewayMetrics
	self        *obs.Service // requests the gateway answers itself
	srv         *fasthttp.Server

	routesMu sync.Mutex
	sources  map[string][]Instance // by source and service
	routes   atomic.Pointer[routeTable]
	rr       atomic.Uint64

	stop     chan struct{}
	stopOnce sync.Once
	bg       sync.WaitGroup // health and sweep loops
	checks   sync.WaitGroup // health checks running; Add under mu while !stopped

	mu      sync.Mutex
	stopped bool
	lns     []net.Listener
	tunnels map[*tunnel]struct{}

	redisWarned atomic.Int64 // unix ns of the last "Redis failed" warning

	// Nonces of signatures: unique per gateway (a random prefix) and per
	// request (a counter); they need not be unpredictable.
	noncePrefix string
	nonceSeq    atomic.Uint64
}

// New checks cfg and returns a Gateway with no routes yet: call SetInstances
// (or discovery) before traffic arrives.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	g := &Gateway{
		cfg:         cfg,
		log:         cfg.Logger,
		tokens:      auth.NewTokens(cfg.JWTSecret, cfg.Now),
		signer:      signature.NewSigner(cfg.SharedSecret),
		canaryUsers: map[string]bool{},
		sources:     map[string][]Instance{},
		stop:        make(chan struct{}),
		tunnels:     map[*tunnel]struct{}{},
		noncePrefix: core.NewTraceID()[:16] + "-",
	}
	for _, id := range cfg.CanaryUserIDs {
		if id = strings.TrimSpace(id); id != "" {
			g.canaryUsers[id] = true
		}
	}
	if err := g.hosts.Add(cfg.PublicHosts...); err != nil {
		return nil, fmt.Errorf("cannot start the gateway: PUBLIC_HOSTS: %w", err)
	}
	g.routes.Store(&routeTable{})
	g.obs, g.self = cfg.Metrics, cfg.Metrics.Service("")
	g.obs.SetSources(obs.GatewaySources{Upstreams: g.upstreamStates})
	if !cfg.RateLimitDisabled {
		g.local = ratelimit.NewLocal(cfg.RateLimitWindow, cfg.RateLimitMax, cfg.Now)
		g.limiter = g.local
		if cfg.Redis != nil {
			if err := rediskey.Check(cfg.RedisPrefix); err != nil {
				return nil, fmt.Errorf("cannot start the gateway: %w", err)
			}
			g.limiter = &redisLimiter{client: cfg.Redis, prefix: cfg.RedisPrefix, window: cfg.RateLimitWindow,
				max: cfg.RateLimitMax, id: core.NewTraceID()[:12]}
		}
	}
	g.srv = &fasthttp.Server{
		Handler:               g.serve,
		ErrorHandler:          g.transportError,
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		// Bodies are read whole (so a request can be retried and its body
		// signed); over the API's limit, transportError answers 413 here
		// rather than streaming what the masters would refuse.
		MaxRequestBodySize: apierr.MaxBody,
		ReadBufferSize:     16 << 10,
		ReadTimeout:        60 * time.Second,
		// No WriteTimeout: a download may take long. Writes are bounded by
		// idleConn's per-write deadline instead.
		IdleTimeout: 2 * time.Minute,
		Logger:      fasthttpLogger{g.log},
		// Never spool a form to temporary files: bodies pass through.
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		// The WebSocket tunnels close their client connections themselves.
		KeepHijackedConns: true,
	}
	g.bg.Add(2)
	go g.healthLoop()
	go g.sweepLoop()
	return g, nil
}

// Handler returns the gateway as a fasthttp handler.
func (g *Gateway) Handler() fasthttp.RequestHandler { return g.serve }

// Serve answers on ln until Shutdown; it returns nil after Shutdown.
func (g *Gateway) Serve(ln net.Listener) error {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	g.lns = append(g.lns, ln)
	g.mu.Unlock()
	if err := g.hosts.Add(crosssite.DefaultNames(ln.Addr())...); err != nil {
		return fmt.Errorf("BUG: default host names: %w", err)
	}
	g.log.Info().Strs("hosts", g.hosts.Names()).Msg("answering to these host names (PUBLIC_HOSTS adds more)")
	err := g.srv.Serve(&linger.Listener{Listener: idleListener{ln, g.cfg.StreamIdleTimeout}})
	g.mu.Lock()
	stopped := g.stopped
	g.mu.Unlock()
	if stopped {
		return nil
	}
	return err
}

// Shutdown stops accepting, closes WebSocket tunnels, waits for open requests
// and stops the health checker.
func (g *Gateway) Shutdown() error {
	g.mu.Lock()
	g.stopped = true
	lns := g.lns
	g.lns = nil
	tunnels := make([]*tunnel, 0, len(g.tunnels))
	for t := range g.tunnels {
		tunnels = append(tunnels, t)
	}
	g.mu.Unlock()
	for _, t := range tunnels {
		t.close()
	}
	err := g.srv.Shutdown()
	for _, ln := range lns {
		_ = ln.Close()
	}
	g.stopOnce.Do(func() { close(g.stop) })
	g.bg.Wait()
	g.checks.Wait()
	for _, up := range g.routes.Load().all {
		up.hc.CloseIdleConnections()
	}
	return err
}

// sweepLoop forgets idle subjects of the local rate limiter.
func (g *Gateway) sweepLoop() {
	defer g.bg.Done()
	if g.local == nil {
		return
	}
	t := time.NewTicker(g.cfg.RateLimitWindow)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			g.local.Sweep()
		}
	}
}

// reqState is what the filters learn about one request.
type reqState struct {
	trace    string
	kind     pathKind
	segs     []string
	user     identity
	verified bool
	canary   bool
	why      obs.CanaryReason // when canary
	up       *upstream
	// limited: the rate limit decided; remaining is what it left, for
	// subject.
	limited   bool
	subject   string
	remaining int
}

// serve runs the filters in API.md's order, then proxies.
func (g *Gateway) serve(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	st := reqState{}
	defer func() { g.finish(ctx, &st, start) }()

	// 1. Trace id: the client's own when valid, else a new one; the
	// upstream gets the same.
	h := &ctx.Request.Header
	if t := h.Peek("X-Trace-Id"); validTraceID(t) {
		st.trace = string(t)
	} else {
		st.trace = core.NewTraceID()
		h.Set("X-Trace-Id", st.trace)
	}
	ctx.Response.Header.Set("X-Trace-Id", st.trace)

	// Identity headers come from this gateway only.
	stripIdentity(h)

	rawPath, ok := requestPath(h.RequestURI())
	if !ok {
		writeError(ctx, st.trace, fasthttp.StatusBadRequest, apierr.BadRequest, "the request target must be a path starting with /")
		return
	}
	var okPath bool
	st.kind, st.segs, okPath = classify(rawPath)
	if !okPath {
		writeError(ctx, st.trace, fasthttp.StatusBadRequest, apierr.BadRequest, "malformed escape in path")
		return
	}
	// A page of another site whose name now points here (DNS rebinding)
	// sends its own name; monitoring answers whatever name a prober uses.
	if st.kind != pathMetrics && !(st.kind == pathActuator && isActuatorHealth(st.segs)) && !g.hosts.Allows(h.Host()) {
		writeError(ctx, st.trace, fasthttp.StatusMisdirectedRequest, apierr.MisdirectedRequest,
			"this gateway does not answer to the name "+strconv.Quote(clip.String(string(h.Host()), 128))+
				"; open it by one of its own names, or add this one to PUBLIC_HOSTS")
		return
	}
	if st.kind == pathMetrics {
		g.obs.Handler()(ctx)
		return
	}

	// 2. JWT.
	var src auth.Source
	st.user, src, st.verified = g.verify(ctx, st.kind)
	public := st.kind == pathPublic || (st.kind == pathActuator && isActuatorHealth(st.segs))
	if !st.verified && !public && !g.cfg.AllowAnonymous {
		g.obs.AuthRefused()
		if wantsHTML(ctx) && st.kind != pathWS {
			ctx.Response.Header.Set("Location", loginLocation(st.segs, rawPath, ctx.URI().QueryString()))
			ctx.Response.Header.Set("Cache-Control", "no-store")
			ctx.SetStatusCode(fasthttp.StatusFound)
			return
		}
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="rlsched"`)
		writeError(ctx, st.trace, fasthttp.StatusUnauthorized, apierr.Unauthorized,
			"sign in first: send a valid token as 'Authorization: Bearer <jwt>' or the jwt_token cookie")
		return
	}
	if st.kind == pathActuator {
		g.actuator(ctx, &st)
		return
	}

	// A cookie comes along with any page's request: a state-changing one
	// must be this site's own (internal/crosssite). A session's app takes
	// bodies of its own kinds: the master checks its requests' origin
	// (httpapi/sessionapp.go).
	if st.kind != pathApp && crosssite.Applies(h, src == auth.Cookie, isSessionPath(st.segs)) {
		if why := crosssite.CrossSite(h, string(h.Host())); why != "" {
			writeError(ctx, st.trace, fasthttp.StatusForbidden, apierr.Forbidden, why)
			return
		}
	}

	// 3. Rate limit on submissions.
	if st.kind == pathSubmit && ctx.IsPost() && g.limiter != nil {
		if !g.rateLimit(ctx, &st) {
			return
		}
	}

	// 4. Canary choice.
	st.canary, st.why = g.chooseCanary(ctx, &st)

	// 5. The forwarded headers, and the signature over the request as the
	// master will receive it (every request: the master believes the
	// client's address and Host only from a signed one).
	clientIP := ctx.RemoteIP().String()
	forwardedHeaders(ctx, clientIP)
	g.sign(&ctx.Request, clientIP, st.user)

	// 6. Proxy, with the fallback.
	if (st.kind == pathWS || st.kind == pathApp) && ctx.Request.Header.ConnectionUpgrade() &&
		bytes.EqualFold(ctx.Request.Header.Peek(fasthttp.HeaderUpgrade), []byte("websocket")) {
		g.proxyWebSocket(ctx, &st)
		return
	}
	g.proxy(ctx, &st)
	g.chargeMembers(ctx, &st)
}

// chargeMembers counts the runs beyond the first of an admitted submission
// that queued several (a sweep) against its subject's limit, as the master
// said (signature.HeaderRunsQueued): a 1,000-member sweep is not one
// submission. What a failed charge costs is a looser limit, so it is only
// counted.
func (g *Gateway) chargeMembers(ctx *fasthttp.RequestCtx, st *reqState) {
	if !st.limited || ctx.Response.StatusCode() != fasthttp.StatusAccepted {
		return
	}
	n, err := strconv.Atoi(string(ctx.Response.Header.Peek(signature.HeaderRunsQueued)))
	if err != nil || n <= 1 {
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), redisTimeout)
	defer cancel()
	if err := g.limiter.Charge(rctx, st.subject, n-1); err != nil {
		g.obs.RateLimitError()
		_ = g.local.Charge(rctx, st.subject, n-1)
	}
}

// finish sets the routing headers, records metrics and logs the request.
func (g *Gateway) finish(ctx *fasthttp.RequestCtx, st *reqState, start time.Time) {
	if st.up != nil {
		ctx.Response.Header.Set("X-Upstream-Service", st.up.Service)
		if st.up.Canary {
			ctx.Response.Header.Set("X-Canary", "true")
		} else {
			ctx.Response.Header.Set("X-Canary", "false")
		}
	}
	ctx.Response.Header.Set("X-Trace-Id", st.trace)
	if st.limited {
		ctx.Response.Header.Set("X-RateLimit-Limit", strconv.Itoa(g.cfg.RateLimitMax))
		ctx.Response.Header.Set("X-RateLimit-Remaining", strconv.Itoa(st.remaining))
	}
	status := ctx.Response.StatusCode()
	d := time.Since(start)
	if st.kind != pathMetrics { // a scrape is not traffic
		svc := g.self
		if st.up != nil {
			svc = st.up.svc
			if st.canary && st.up.Canary {
				g.obs.Canary(st.why)
			}
		}
		svc.Request(routeClass(st), status, d)
	}
	lvl := zerolog.DebugLevel
	if status >= 500 {
		lvl = zerolog.WarnLevel
	}
	if ev := g.log.WithLevel(lvl); ev.Enabled() {
		ev = ev.Str("method", clip.String(string(ctx.Method()), 16)).
			Str("path", clip.String(loggedURI(ctx.Request.Header.RequestURI()), 512)).
			Int("status", status).Dur("duration", d).Str("traceId", st.trace).
			Str("remote", ctx.RemoteIP().String())
		if st.up != nil {
			ev = ev.Str("upstream", st.up.URL)
		}
		if st.verified {
			ev = ev.Str("userId", st.user.id)
		}
		ev.Msg("request")
	}
}

// loggedURI is a request target as the access log shows it: the values of
// credentials in the query (a WebSocket's ?token=, which browsers cannot
// send as a header) replaced by "***", so the log holds no token.
func loggedURI(uri []byte) string {
	i := bytes.IndexByte(uri, '?')
	if i < 0 {
		return string(uri)
	}
	out := append([]byte(nil), uri[:i+1]...)
	for n, kv := range bytes.Split(uri[i+1:], []byte("&")) {
		if n > 0 {
			out = append(out, '&')
		}
		k, _, hasValue := bytes.Cut(kv, []byte("="))
		if hasValue && secretParam(k) {
			kv = append(append([]byte(nil), k...), "=***"...)
		}
		out = append(out, kv...)
	}
	return string(out)
}

// secretParam reports whether a query parameter named k (raw, maybe
// percent-escaped) carries a credential.
func secretParam(k []byte) bool {
	name, err := url.QueryUnescape(string(k))
	if err != nil {
		return true // unreadable: hide it rather than guess
	}
	switch strings.ToLower(name) {
	case "token", "access_token", "jwt", "jwt_token", "password", "secret":
		return true
	}
	return false
}

// requestPath is the raw path of a request target, as the master's
// URI().PathOriginal() sees it: up to '?' or '#'. Only origin-form targets
// are proxied.
func requestPath(uri []byte) ([]byte, bool) {
	if len(uri) == 0 || uri[0] != '/' {
		return nil, false
	}
	if i := bytes.IndexAny(uri, "?#"); i >= 0 {
		uri = uri[:i]
	}
	return uri, true
}

// validTraceID is core.ValidTraceID without a regexp: 1–64 of [A-Za-z0-9_-].
func validTraceID(b []byte) bool {
	if len(b) == 0 || len(b) > 64 {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// stripIdentity removes every X-User-* and X-Gateway-* header: only this
// gateway may set them.
func stripIdentity(h *fasthttp.RequestHeader) {
	if raw := h.RawHeaders(); len(raw) > 0 && !hasIdentityHeader(raw) {
		return // the common case, without walking (and copying) the headers
	}
	var del [8]string
	n := 0
	more := false
	for k := range h.All() {
		if len(k) > 7 && (bytes.EqualFold(k[:7], []byte("x-user-")) ||
			len(k) > 10 && bytes.EqualFold(k[:10], []byte("x-gateway-"))) {
			if n < len(del) {
				del[n] = string(k)
				n++
			} else {
				more = true
			}
		}
	}
	for _, k := range del[:n] {
		h.Del(k)
	}
	if more { // a client sending that many is hostile; finish the job
		stripIdentity(h)
	}
}

// hasIdentityHeader reports whether raw request headers may hold an
// X-User-* or X-Gateway-* header (any case); a false positive only costs
// the slow path.
func hasIdentityHeader(raw []byte) bool {
	for i := 0; i+2 <= len(raw); i++ {
		if (i == 0 || raw[i-1] == '\n') && (raw[i]|0x20) == 'x' && raw[i+1] == '-' {
			rest := raw[i+2:]
			if len(rest) >= 5 && bytes.EqualFold(rest[:5], []byte("user-")) ||
				len(rest) >= 8 && bytes.EqualFold(rest[:8], []byte("gateway-")) {
				return true
			}
		}
	}
	return false
}

// sign sets the headers the gateway vouches for (the timestamp, a nonce, the
// client's address and, when verified, the identity) and their signature
// over req as the master will receive it (internal/signature).
func (g *Gateway) sign(req *fasthttp.Request, clientIP string, who identity) {
	h := &req.Header
	if who.ok() {
		h.Set(signature.HeaderUserID, who.id)
		h.Set(signature.HeaderUserName, who.name)
		h.Set(signature.HeaderUserRole, who.role)
		h.Set(signature.HeaderTokenVersion, who.version)
	}
	var buf [64]byte
	h.SetBytesV(signature.HeaderTimestamp, signature.AppendTimestamp(buf[:0], g.cfg.Now()))
	h.SetBytesV(signature.HeaderNonce, strconv.AppendUint(append(buf[:0], g.noncePrefix...), g.nonceSeq.Add(1), 36))
	h.Set(signature.HeaderClientIP, clientIP)
	h.SetBytesV(signature.HeaderSignature, g.signer.AppendRequest(buf[:0], req))
}

// transportError answers requests fasthttp could not read.
func (g *Gateway) transportError(ctx *fasthttp.RequestCtx, err error) {
	trace := core.NewTraceID()
	if t := ctx.Request.Header.Peek("X-Trace-Id"); validTraceID(t) {
		trace = string(t)
	}
	apierr.Write(ctx, trace, apierr.Transport(err))
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		linger.Arm(ctx.Conn()) // the client may still be sending
	}
	ctx.Response.Header.Set("X-Trace-Id", trace)
}

type fasthttpLogger struct{ log zerolog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Warn().Str("component", "fasthttp").Msgf(format, args...)
}

// idleListener bounds every write to a client by an idle deadline: no
// response, however long, waits forever on a client that stopped reading.
type idleListener struct {
	net.Listener
	idle time.Duration
}

func (l idleListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &idleConn{Conn: c, idle: l.idle}, nil
}

type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	return c.Conn.Write(p)
}
