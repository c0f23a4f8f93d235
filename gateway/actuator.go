package gateway

import (
	"encoding/json"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/apierr"
)

// The actuator (API.md, Gateway): /gateway-actuator/health, public, and
// /gateway-actuator/gateway/routes, for admins (it shows the masters'
// addresses).

func isActuatorHealth(segs []string) bool {
	return len(segs) == 2 && segs[1] == "health"
}

func (g *Gateway) actuator(ctx *fasthttp.RequestCtx, st *reqState) {
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set("Allow", "GET")
		writeError(ctx, st.trace, fasthttp.StatusMethodNotAllowed, apierr.MethodNotAllowed, "use GET for this path")
		return
	}
	switch {
	case isActuatorHealth(st.segs):
		g.health(ctx)
	case len(st.segs) == 3 && st.segs[1] == "gateway" && st.segs[2] == "routes":
		if !st.verified || st.user.role != string(core.RoleAdmin) || !g.adminNow(ctx, st) {
			writeError(ctx, st.trace, fasthttp.StatusForbidden, apierr.Forbidden, "the routes are for admins")
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, g.Routes())
	default:
		writeError(ctx, st.trace, fasthttp.StatusNotFound, apierr.NotFound, "path not found")
	}
}

// adminNow asks a master whether the caller is an admin now. A token's
// role is what its user was when it was issued: one demoted, disabled or
// signed out since still says ADMIN until it expires, and the gateway knows
// nothing of revocations. The master reads the user on every request, so
// GET /api/auth/me, signed as any proxied request, answers for now. When no
// master answers at all (none registered, all down: exactly when an
// operator looks at the routes), the token's role stands, as it did before.
func (g *Gateway) adminNow(ctx *fasthttp.RequestCtx, st *reqState) bool {
	up := g.routes.Load().pick(false, g.rr.Add(1), time.Now().UnixNano(), nil)
	if up == nil {
		return true
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetRequestURI("/api/auth/me")
	req.UseHostHeader = true
	req.Header.SetHost(up.host)
	req.Header.Set("X-Trace-Id", st.trace)
	g.sign(req, ctx.RemoteIP().String(), st.user)
	if err := up.hc.DoTimeout(req, resp, g.cfg.UpstreamTimeout); err != nil || resp.StatusCode() >= 500 {
		g.log.Info().Err(err).Int("status", resp.StatusCode()).Str("traceId", st.trace).
			Msg("the routes page: no master could say who the caller is now; the token's role stands")
		return true
	}
	var me struct {
		Role string `json:"role"`
	}
	return resp.StatusCode() == fasthttp.StatusOK && json.Unmarshal(resp.Body(), &me) == nil && me.Role == string(core.RoleAdmin)
}

type healthJSON struct {
	Status   string                   `json:"status"`
	Gateway  string                   `json:"gateway"`
	Version  string                   `json:"version"`
	Services map[string]serviceHealth `json:"services"`
}

type serviceHealth struct {
	Available int `json:"available"`
	Total     int `json:"total"`
}

// health is 200 UP while at least one stable instance takes requests, else
// 503 DOWN (the gateway runs but can only answer the fallback).
func (g *Gateway) health(ctx *fasthttp.RequestCtx) {
	h := healthJSON{Status: "UP", Gateway: g.cfg.Name, Version: core.Version, Services: map[string]serviceHealth{}}
	now := time.Now().UnixNano()
	t := g.routes.Load()
	stableUp := 0
	for _, up := range t.all {
		s := h.Services[up.Service]
		s.Total++
		if up.available(now) {
			s.Available++
			if !up.Canary {
				stableUp++
			}
		}
		h.Services[up.Service] = s
	}
	status := fasthttp.StatusOK
	if stableUp == 0 {
		h.Status, status = "DOWN", fasthttp.StatusServiceUnavailable
	}
	writeJSON(ctx, status, h)
}

// RouteInstance is one instance in the routes answer.
type RouteInstance struct {
	URL       string            `json:"url"`
	Service   string            `json:"service"`
	Canary    bool              `json:"canary"`
	Source    string            `json:"source"`
	Available bool              `json:"available"`
	Healthy   bool              `json:"healthy"`
	Down      bool              `json:"registryDown"`
	Ejected   bool              `json:"ejected"`
	EjectedTo *time.Time        `json:"ejectedUntil,omitempty"`
	LastCheck *time.Time        `json:"lastCheck,omitempty"`
	LastError string            `json:"lastError,omitempty"`
	Conns     int               `json:"connections"`
	Metadata  map[string]string `json:"metadata,omitempty"`
}

// Route is one service and its instances.
type Route struct {
	Service   string          `json:"service"`
	Canary    bool            `json:"canary"`
	Instances []RouteInstance `json:"instances"`
}

// RoutesJSON is /gateway-actuator/gateway/routes.
type RoutesJSON struct {
	Routes []Route `json:"routes"`
}

// Routes reports the routes: every service with its instances, canary or
// not, available or not. Safe to call from any goroutine.
func (g *Gateway) Routes() RoutesJSON {
	now := time.Now()
	out := RoutesJSON{Routes: []Route{}}
	idx := map[string]int{}
	for _, up := range g.routes.Load().all {
		key := up.Service + "|" + boolStr(up.Canary)
		i, ok := idx[key]
		if !ok {
			i = len(out.Routes)
			idx[key] = i
			out.Routes = append(out.Routes, Route{Service: up.Service, Canary: up.Canary, Instances: []RouteInstance{}})
		}
		ri := RouteInstance{URL: up.URL, Service: up.Service, Canary: up.Canary, Source: up.source,
			Available: up.available(now.UnixNano()), Healthy: up.healthy.Load(), Down: up.down.Load(), Conns: up.conns.count()}
		if m := up.meta.Load(); m != nil {
			ri.Metadata = *m
		}
		if until := up.ejectedUntil.Load(); until != 0 && now.UnixNano() < until {
			ri.Ejected = true
			t := time.Unix(0, until).UTC()
			ri.EjectedTo = &t
		}
		if lc := up.lastCheck.Load(); lc != 0 {
			t := time.Unix(0, lc).UTC()
			ri.LastCheck = &t
		}
		if e := up.lastError.Load(); e != nil {
			ri.LastError = *e
		}
		out.Routes[i].Instances = append(out.Routes[i].Instances, ri)
	}
	return out
}

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
