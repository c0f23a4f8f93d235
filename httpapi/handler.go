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
	"github.com/rlsched/rlsched/internal/guard"
)

// request is one API call as handlers see it.
type request struct {
	ctx   *fasthttp.RequestCtx
	trace string
	user  core.User   // the verified caller; zero on public routes
	gw    gatewaySeen // what the gateway's signature vouched for
	id    string      // the run id of the path, validated
	rest  []string    // path segments after the id (artifact paths)
}

type handlerFunc func(r *request) *apiError

// route is what the router found for a path.
type route struct {
	method string // "" accepts any method (only for paths that are always refused)
	public bool
	// session: sign-in, registration or sign-out, which a page of another
	// site must not make a browser do either (login CSRF).
	session bool
	// probe: public and read-only, for monitoring, which may know this
	// master by any name (no Host check).
	probe bool
	h     handlerFunc
	// hasID: the path names a run (r.id), or a sweep when idOf says so;
	// it is validated after authentication and before the handler runs.
	hasID bool
	idOf  string // "" (a run) or "sweep"
	id    string
	rest  []string
	// onGet, when set, answers GET on a path whose method is another.
	onGet handlerFunc
}

// Handler returns the API as a fasthttp handler, with trace ids, the access
// log and panic recovery around the router. Safe for concurrent use.
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
		ev := s.log.Info()
		if status >= 500 {
			ev = s.log.Warn()
		}
		ev = ev.Str("method", truncate(string(ctx.Method()), 16)).
			Str("path", truncate(string(ctx.Request.URI().PathOriginal()), 512)).
			Int("status", status).
			Dur("duration", time.Since(start)).
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
	rt, e := s.route(r.ctx.Request.URI().PathOriginal())
	if e != nil {
		return e
	}
	// A page of another site whose name now points here (DNS rebinding)
	// sends its own name. The gateway checked the names it was sent; a
	// probe's endpoint answers whatever name the prober uses.
	if !r.gw.signed && !rt.probe && !s.hosts.Allows(r.ctx.Host()) {
		return errMisdirected(r.ctx.Host())
	}
	if rt.onGet != nil && r.ctx.IsGet() {
		rt.method, rt.h = fasthttp.MethodGet, rt.onGet
	}
	if rt.method != "" && string(r.ctx.Method()) != rt.method {
		allow := rt.method
		if rt.onGet != nil {
			allow = fasthttp.MethodGet + ", " + allow
		}
		r.ctx.Response.Header.Set("Allow", allow)
		return &apiError{fasthttp.StatusMethodNotAllowed, codeMethodNotAllowed,
			fmt.Sprintf("use %s for this path", rt.method)}
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
	// signed in by it must be this site's own (internal/guard). After
	// authentication: a request that proves no one gets its 401 first.
	if _, src := auth.FromRequest(&r.ctx.Request, false); guard.Applies(&r.ctx.Request.Header, src == auth.Cookie, rt.session) {
		if why := guard.CrossSite(&r.ctx.Request.Header, r.site()); why != "" {
			return &apiError{fasthttp.StatusForbidden, codeForbidden, why}
		}
	}
	if rt.hasID {
		if !core.ValidTaskID(rt.id) {
			what := rt.idOf
			if what == "" {
				what = "run"
			}
			return errBadRequest("malformed %s id: use 1–64 of [A-Za-z0-9_-]", what)
		}
		r.id = rt.id
	}
	if rt.h == nil {
		return errNotFound("path")
	}
	r.rest = rt.rest
	return rt.h(r)
}

// route maps a raw request path to its handler. It works on the original
// (still escaped) path, unescaping segment by segment, so "..%2F.." is one
// segment that fails id validation instead of a path fasthttp normalised away.
func (s *Server) route(raw []byte) (route, *apiError) {
	p := string(raw)
	if !strings.HasPrefix(p, "/") {
		return route{}, errNotFound("path")
	}
	segs := strings.Split(p[1:], "/")
	for i, seg := range segs {
		u, err := url.PathUnescape(seg)
		if err != nil {
			return route{}, errBadRequest("malformed escape in path")
		}
		segs[i] = u
	}
	is := func(want ...string) bool {
		if len(segs) != len(want) {
			return false
		}
		for i := range want {
			if segs[i] != want[i] {
				return false
			}
		}
		return true
	}
	const get, post = fasthttp.MethodGet, fasthttp.MethodPost
	switch {
	case is("api", "auth", "register"):
		return route{method: post, public: true, session: true, h: s.register}, nil
	case is("api", "auth", "login"):
		return route{method: post, public: true, session: true, h: s.login}, nil
	case is("api", "auth", "logout"):
		return route{method: post, public: true, session: true, h: s.logout}, nil
	case is("api", "auth", "me"):
		return route{method: get, h: s.me}, nil
	case is("api", "monitor", "health"):
		return route{method: get, public: true, probe: true, h: s.health}, nil
	case is("api", "train"):
		return route{method: post, h: s.submit}, nil
	case is("api", "tasks"):
		return route{method: get, h: s.listTasks}, nil
	case is("api", "workers"):
		return route{method: get, h: s.workers}, nil
	case is("api", "sweeps"):
		return route{method: post, h: s.createSweep, onGet: s.listSweeps}, nil
	case len(segs) >= 3 && len(segs) <= 4 && segs[0] == "api" && segs[1] == "sweeps":
		rt := route{hasID: true, idOf: "sweep", id: segs[2]}
		switch {
		case len(segs) == 3:
			rt.method, rt.h = get, s.getSweep
		case segs[3] == "metrics":
			rt.method, rt.h = get, s.sweepMetrics
		case segs[3] == "retry":
			rt.method, rt.h = post, s.retrySweep
		case segs[3] == "cancel":
			rt.method, rt.h = post, s.cancelSweep
		default:
			if core.ValidTaskID(segs[2]) {
				return route{}, errNotFound("path")
			}
		}
		return rt, nil
	case is("rlsched.py"): // the Python client, for notebooks (API.md)
		return route{method: get, public: true, h: s.pythonClient}, nil
	case is("ws"): // authenticates itself: it also takes ?token=
		return route{method: get, public: true, h: s.ws}, nil
	case len(segs) >= 4 && segs[0] == "api" && segs[1] == "monitor" && segs[2] == "logs":
		// The id is everything after logs/, so "../x" is one bad id.
		return route{method: get, h: s.logs, hasID: true, id: strings.Join(segs[3:], "/")}, nil
	case len(segs) >= 3 && segs[0] == "api" && segs[1] == "tasks":
		id := segs[2]
		rt := route{hasID: true, id: id}
		switch {
		case len(segs) == 3:
			rt.method, rt.h = get, s.getTask
		case len(segs) == 4 && segs[3] == "cancel":
			rt.method, rt.h = post, s.cancelTask
		case len(segs) == 4 && segs[3] == "rerun":
			rt.method, rt.h = post, s.rerunTask
		case len(segs) == 4 && segs[3] == "metrics":
			rt.method, rt.h = get, s.taskMetrics
		case len(segs) == 4 && segs[3] == "artifacts":
			rt.method, rt.h = get, s.listArtifacts
		case len(segs) >= 5 && segs[3] == "artifacts":
			rt.method, rt.h, rt.rest = get, s.getArtifact, segs[4:]
		default:
			if core.ValidTaskID(id) {
				return route{}, errNotFound("path")
			}
			// A bad id under /api/tasks/ is refused as such whatever follows
			// (after authentication): rt.h stays nil, validation fails first.
		}
		return rt, nil
	}
	if rt, ok := s.uiRoute(segs); ok { // the dashboard (ui.go)
		return rt, nil
	}
	return route{}, errNotFound("path")
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

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
