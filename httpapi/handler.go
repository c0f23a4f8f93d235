package httpapi

import (
	"encoding/json"
	"fmt"
	"net/url"
	"runtime/debug"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/auth"
	"github.com/rlsched/rlsched/internal/clip"
	"github.com/rlsched/rlsched/internal/crosssite"
	"github.com/rlsched/rlsched/internal/obs"
)

// request is one API call as handlers see it.
type request struct {
	ctx   *fasthttp.RequestCtx
	trace string
	user  core.User   // the verified caller; zero on public routes
	gw    gatewaySeen // what the gateway's signature vouched for
	rt    *route      // the route found; nil when none was
	id    string      // the run id of the path ({id}), validated
	param string      // the other parameter of the path ({name}), for its handler to check
	rest  []string    // path segments of a {rest...} (artifact paths, static files)
	app   bool        // a request to a session's web app (sessionapp.go)
}

type handlerFunc func(r *request) *apiError

// route is one entry of the router's table: a method and a path pattern.
type route struct {
	method string // "" accepts any method (only for paths that are always refused)
	// pattern is the path's template, as in the OpenAPI document:
	// literal segments, {id} (a run id, validated after authentication),
	// {id...} (the rest of the path as one run id, so "../x" is one bad
	// id), {name} (one segment for the handler: r.param) and {rest...}
	// (one or more segments: r.rest).
	pattern string
	segs    []string // pattern split on "/"
	public  bool
	// session: sign-in, registration or sign-out, which a page of another
	// site must not make a browser do either (login CSRF).
	session bool
	// probe: public and read-only, for monitoring, which may know this
	// master by any name (no Host check).
	probe bool
	// admin: for admins only (403 for anyone else).
	admin bool
	h     handlerFunc
	met   *obs.Route // the route's request metrics
	// submission: the body is a run's spec, which may carry a code diff:
	// inflated (body.go), it may reach MaxSubmitBodySize.
	submission bool
	// queues: the route queues runs, so it takes the submission limit
	// (submitlimit.go).
	queues bool
	// idOf names what the pattern's {id} is, in messages: "" (a run) or
	// "sweep".
	idOf string
	// inflateLimit, when set, is how far a gzip body may inflate instead
	// (a code snapshot's manifest, codetree).
	inflateLimit int
}

// apiRoutes is the REST API: every path the OpenAPI document describes
// (openapi_test.go holds the two to each other).
func (s *Server) apiRoutes() []*route {
	const get, post, put, patch, del = fasthttp.MethodGet, fasthttp.MethodPost, fasthttp.MethodPut,
		fasthttp.MethodPatch, fasthttp.MethodDelete
	rs := []*route{
		{method: post, pattern: "/api/auth/register", public: true, session: true, h: s.register},
		{method: post, pattern: "/api/auth/login", public: true, session: true, h: s.login},
		{method: post, pattern: "/api/auth/logout", public: true, session: true, h: s.logout},
		{method: get, pattern: "/api/auth/me", h: s.me},
		{method: put, pattern: "/api/auth/me/password", h: s.changePassword},
		{method: post, pattern: "/api/auth/me/token", h: s.newToken},
		{method: get, pattern: "/api/auth/me/notifications", h: s.getNotifications},
		{method: put, pattern: "/api/auth/me/notifications", h: s.putNotifications},
		{method: post, pattern: "/api/auth/me/notifications/test", h: s.testNotifications},
		{method: get, pattern: "/api/monitor/health", public: true, probe: true, h: s.health},
		{method: get, pattern: "/metrics", public: true, probe: true, h: s.metrics},
		{method: get, pattern: "/api/openapi.json", h: s.openAPI},
		{method: post, pattern: "/api/train", submission: true, queues: true, h: s.submit},
		{method: get, pattern: "/api/tasks", h: s.listTasks},
		{method: get, pattern: "/api/workers", h: s.workers},
		{method: get, pattern: "/api/users/usage", h: s.usersUsage},
		{method: get, pattern: "/api/queue", h: s.queue},
		{method: post, pattern: "/api/workers/{workerId}/drain", admin: true, h: s.drainWorker},
		{method: del, pattern: "/api/workers/{workerId}/drain", admin: true, h: s.drainWorker},
		{method: del, pattern: "/api/workers/{workerId}", admin: true, h: s.forgetWorker},
		{method: get, pattern: "/api/admin/users", admin: true, h: s.listUsers},
		{method: post, pattern: "/api/admin/users", admin: true, h: s.addUser},
		{method: patch, pattern: "/api/admin/users/{username}", admin: true, h: s.patchUser},
		{method: del, pattern: "/api/admin/users/{username}", admin: true, h: s.deleteUser},
		{method: get, pattern: "/api/admin/quotas", admin: true, h: s.listQuotas},
		{method: put, pattern: "/api/admin/quotas/{username}", admin: true, h: s.putQuota},
		// Authenticates itself: it also takes ?token=.
		{method: get, pattern: "/ws", public: true, h: s.ws},
		// An interactive run's terminal (terminal.go); authenticates itself.
		{method: get, pattern: "/ws/sessions/{id}", public: true, h: s.terminal},
		{method: get, pattern: "/api/tasks/{id}/terminal", public: true, h: s.terminal},
		{method: get, pattern: "/api/monitor/logs/{id...}", h: s.logs},
		{method: get, pattern: "/api/tasks/{id}", h: s.getTask},
		{method: patch, pattern: "/api/tasks/{id}", h: s.editTask},
		{method: post, pattern: "/api/tasks/{id}/cancel", h: s.cancelTask},
		{method: post, pattern: "/api/tasks/{id}/rerun", submission: true, queues: true, h: s.rerunTask},
		{method: post, pattern: "/api/tasks/{id}/priority", admin: true, h: s.setPriority},
		{method: get, pattern: "/api/tasks/{id}/code.diff", h: s.codeDiff},
		{method: get, pattern: "/api/tasks/{id}/metrics", h: s.taskMetrics},
		{method: get, pattern: "/api/sparklines", h: s.sparklines},
		{method: get, pattern: "/api/tasks/{id}/artifacts", h: s.listArtifacts},
		{method: get, pattern: "/api/tasks/{id}/artifacts/{rest...}", h: s.getArtifact},
		{method: post, pattern: "/api/code/missing", h: s.codeMissing},
		{method: put, pattern: "/api/code/blobs/{sha256}", h: s.putCodeBlob},
		{method: post, pattern: "/api/code/trees", inflateLimit: maxManifestBody, h: s.putCodeTree},
		{method: get, pattern: "/api/tasks/{id}/code", h: s.listCode},
		{method: get, pattern: "/api/tasks/{id}/code-diff/{other}", h: s.codeCompare},
		{method: get, pattern: "/api/tasks/{id}/code/{rest...}", h: s.getCodeFile},
		{method: get, pattern: "/api/compare", h: s.compare},
		{method: get, pattern: "/api/sweeps", h: s.listSweeps},
		{method: post, pattern: "/api/sweeps", submission: true, queues: true, h: s.createSweep},
		{method: get, pattern: "/api/sweeps/{id}", idOf: "sweep", h: s.getSweep},
		{method: get, pattern: "/api/sweeps/{id}/metrics", idOf: "sweep", h: s.sweepMetrics},
		{method: post, pattern: "/api/sweeps/{id}/retry", idOf: "sweep", queues: true, h: s.retrySweep},
		{method: post, pattern: "/api/sweeps/{id}/cancel", idOf: "sweep", h: s.cancelSweep},
		{method: post, pattern: "/api/pipelines", submission: true, queues: true, h: s.createPipeline},
		{method: get, pattern: "/api/pipelines/{id}", idOf: "pipeline", h: s.getPipeline},
		{method: post, pattern: "/api/pipelines/{id}/retry", idOf: "pipeline", queues: true, h: s.retryPipeline},
		// The Python client, for notebooks (API.md).
		{method: get, pattern: "/rlsched.py", public: true, h: s.pythonClient},
	}
	for _, rt := range rs {
		rt.segs = strings.Split(rt.pattern[1:], "/")
	}
	return rs
}

// match reports whether segs fit rt's pattern, and fills r's parameters
// from them when r is not nil.
func (rt *route) match(segs []string, r *request) bool {
	for i, p := range rt.segs {
		if strings.HasSuffix(p, "...}") { // the rest, at least one segment
			if i >= len(segs) {
				return false
			}
			if r != nil {
				if p == "{id...}" {
					r.id = strings.Join(segs[i:], "/")
				} else {
					r.rest = segs[i:]
				}
			}
			return true
		}
		if i >= len(segs) {
			return false
		}
		switch {
		case p == "{id}":
			if r != nil {
				r.id = segs[i]
			}
		case strings.HasPrefix(p, "{"):
			if r != nil {
				r.param = segs[i]
			}
		case p != segs[i]:
			return false
		}
	}
	return len(segs) == len(rt.segs)
}

// hasID: the pattern names a run, validated before the handler runs.
func (rt *route) hasID() bool { return strings.Contains(rt.pattern, "{id") }

// Handler returns the API as a fasthttp handler, with trace ids, the access
// log, the request metrics and panic recovery around the router. Safe for
// concurrent use.
func (s *Server) Handler() fasthttp.RequestHandler {
	return s.serve
}

func (s *Server) serve(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	trace := string(ctx.Request.Header.Peek("X-Trace-Id"))
	if !core.ValidTraceID(trace) {
		trace = core.NewTraceID()
	}
	ctx.Response.Header.Set("X-Trace-Id", trace)
	r := &request{ctx: ctx, trace: trace}
	defer func() {
		status := ctx.Response.StatusCode()
		d := time.Since(start)
		met := s.unrouted
		if r.rt != nil {
			met = r.rt.met
		}
		met.Observe(status, d)
		ev := s.log.Info()
		if status >= 500 {
			ev = s.log.Warn()
		}
		ev = ev.Str("method", clip.String(string(ctx.Method()), 16)).
			Str("path", clip.String(string(ctx.Request.URI().PathOriginal()), 512)).
			Int("status", status).
			Dur("duration", d).
			Str("traceId", trace).
			Str("remote", ctx.RemoteIP().String())
		if r.user.ID != 0 {
			ev = ev.Int64("userId", r.user.ID)
		}
		ev.Msg("request")
	}()
	defer func() {
		if p := recover(); p != nil {
			s.log.Error().Str("traceId", trace).Str("panic", fmt.Sprint(p)).
				Bytes("stack", debug.Stack()).Msg("BUG: handler panicked")
			writeError(ctx, trace, &apiError{fasthttp.StatusInternalServerError, codeInternal,
				"internal error; report the trace id"})
		}
	}()
	if e := s.dispatch(r); e != nil {
		writeError(ctx, trace, e)
	}
}

func (s *Server) dispatch(r *request) *apiError {
	if len(r.ctx.Request.Body()) > MaxBodySize {
		return errTooLarge
	}
	r.gw = s.checkGateway(r.ctx)
	if id, ok := appPath(r.ctx.Request.URI().PathOriginal()); ok {
		return s.sessionApp(r, id) // proxied, not routed (sessionapp.go)
	}
	rt, allow, e := s.route(r)
	if e != nil {
		return e
	}
	r.rt = rt
	// A page of another site whose name now points here (DNS rebinding)
	// sends its own name. The gateway checked the names it was sent; a
	// probe's endpoint answers whatever name the prober uses.
	if !r.gw.signed && !rt.probe && !s.hosts.Allows(r.ctx.Host()) {
		return errMisdirected(r.ctx.Host())
	}
	if allow != "" {
		r.ctx.Response.Header.Set("Allow", allow)
		return &apiError{fasthttp.StatusMethodNotAllowed, codeMethodNotAllowed,
			fmt.Sprintf("use %s for this path", strings.ReplaceAll(allow, ", ", " or "))}
	}
	if !rt.public {
		u, e := s.authenticate(r, false)
		if e != nil {
			r.ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="rlsched"`)
			return e
		}
		r.user = u
	}
	// A cookie comes along with any page's request: a state-changing one
	// signed in by it must be this site's own (internal/crosssite). After
	// authentication: a request that proves no one gets its 401 first.
	if _, src := auth.FromRequest(&r.ctx.Request, false); crosssite.Applies(&r.ctx.Request.Header, src == auth.Cookie, rt.session) {
		if why := crosssite.CrossSite(&r.ctx.Request.Header, r.site()); why != "" {
			return &apiError{fasthttp.StatusForbidden, codeForbidden, why}
		}
	}
	if rt.admin && r.user.Role != core.RoleAdmin {
		return &apiError{fasthttp.StatusForbidden, codeForbidden, "only an admin may do this"}
	}
	if rt.hasID() && !core.ValidTaskID(r.id) {
		what := rt.idOf
		if what == "" {
			what = "run"
		}
		return errBadRequest("malformed %s id: use 1–64 of [A-Za-z0-9_-]", what)
	}
	if rt.h == nil {
		return errNotFound("path")
	}
	limit := MaxBodySize
	if rt.submission {
		limit = MaxSubmitBodySize
	}
	if rt.inflateLimit > 0 {
		limit = rt.inflateLimit
	}
	if e := inflateBody(&r.ctx.Request, limit); e != nil {
		return e
	}
	if e := s.submits.admit(r); e != nil {
		return e
	}
	if e := rt.h(r); e != nil {
		return e
	}
	s.submits.charge(r)
	return nil
}

// route finds r's route in the table (or the dashboard's), filling r's
// path parameters. It works on the original (still escaped) path,
// unescaping segment by segment, so "..%2F.." is one segment that fails id
// validation instead of a path fasthttp normalised away. allow, when not
// empty, lists the methods the path takes and r's is not among them.
func (s *Server) route(r *request) (rt *route, allow string, e *apiError) {
	p := string(r.ctx.Request.URI().PathOriginal())
	if !strings.HasPrefix(p, "/") {
		return nil, "", errNotFound("path")
	}
	segs := strings.Split(p[1:], "/")
	for i, seg := range segs {
		u, err := url.PathUnescape(seg)
		if err != nil {
			return nil, "", errBadRequest("malformed escape in path")
		}
		segs[i] = u
	}
	method := string(r.ctx.Method())
	var methods []string
	var first *route
	for _, c := range s.routes {
		if !c.match(segs, nil) {
			continue
		}
		if first == nil {
			first = c
		}
		if c.method == method {
			c.match(segs, r)
			return c, "", nil
		}
		methods = append(methods, c.method)
	}
	if first != nil {
		return first, strings.Join(methods, ", "), nil
	}
	if rt, rest, ok := s.uiRoute(segs); ok { // the dashboard (ui.go)
		r.rest = rest
		if rt.method != method {
			return rt, rt.method, nil
		}
		return rt, "", nil
	}
	if method == fasthttp.MethodGet && segs[0] != "api" && segs[0] != "static" && wantsPage(r) {
		return s.uiMissing, "", nil // a browser's unknown page: the dashboard says so (ui.go)
	}
	if len(segs) >= 3 && segs[0] == "api" && segs[1] == "tasks" && !core.ValidTaskID(segs[2]) {
		// A bad id under /api/tasks/ is refused as such whatever follows
		// (after authentication): the route has no handler, validation
		// fails first.
		r.id = segs[2]
		return s.badRun, "", nil
	}
	return nil, "", errNotFound("path")
}

// metrics is GET /metrics: the master's Prometheus metrics.
func (s *Server) metrics(r *request) *apiError {
	s.cfg.Metrics.Handler()(r.ctx)
	return nil
}

// writeJSON answers with v as JSON.
func (s *Server) writeJSON(r *request, status int, v any) *apiError {
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error().Err(err).Str("traceId", r.trace).Msg("BUG: cannot encode an answer")
		return &apiError{fasthttp.StatusInternalServerError, codeInternal, "internal error; report the trace id"}
	}
	r.ctx.SetStatusCode(status)
	r.ctx.SetContentType("application/json; charset=utf-8")
	r.ctx.SetBody(b)
	return nil
}
