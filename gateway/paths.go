package gateway

import (
	"bytes"
	"net/url"
	"strings"

	"github.com/rlsched/rlsched/internal/obs"
)

// The gateway classifies a path the way the master routes it: the original
// (still escaped) path split on "/", each segment unescaped. So "/api/%74rain"
// is the submission route for the rate limit too, as the master sees it.

// pathKind is what the filters need to know about a path.
type pathKind uint8

const (
	pathPrivate  pathKind = iota // token required
	pathPublic                   // API.md's public list
	pathSubmit                   // POST /api/train, /api/tasks/{id}/rerun, /api/sweeps, /api/sweeps/{id}/retry: rate limited
	pathWS                       // /ws and the terminals' WebSockets: token also from ?token=
	pathActuator                 // /gateway-actuator/...: answered here
	pathMetrics                  // /metrics: answered here
	pathApp                      // /sessions/{id}/...: a session's web app (issue 34), WebSockets too
)

// classify maps a raw request path to its kind; ok is false for a malformed
// escape.
func classify(raw []byte) (kind pathKind, segs []string, ok bool) {
	if len(raw) == 0 || raw[0] != '/' {
		return pathPrivate, nil, true
	}
	// Fast path for the common unescaped case.
	if bytes.IndexByte(raw, '%') < 0 {
		segs = strings.Split(string(raw[1:]), "/")
	} else {
		segs = strings.Split(string(raw[1:]), "/")
		for i, s := range segs {
			u, err := url.PathUnescape(s)
			if err != nil {
				return pathPrivate, nil, false
			}
			segs[i] = u
		}
	}
	return kindOf(segs), segs, true
}

func kindOf(segs []string) pathKind {
	n := len(segs)
	switch {
	case n == 1 && segs[0] == "metrics":
		return pathMetrics
	case n >= 1 && segs[0] == "gateway-actuator":
		return pathActuator
	case n == 1 && segs[0] == "ws":
		return pathWS
	case n >= 2 && segs[0] == "sessions":
		return pathApp
	case n == 3 && segs[0] == "ws" && segs[1] == "sessions",
		n == 4 && segs[0] == "api" && segs[1] == "tasks" && segs[3] == "terminal":
		return pathWS // an interactive run's terminal (issue 34)
	case n == 2 && segs[0] == "api" && segs[1] == "train":
		return pathSubmit
	case n == 4 && segs[0] == "api" && segs[1] == "tasks" && segs[3] == "rerun":
		return pathSubmit // a new run like any submission
	case n == 2 && segs[0] == "api" && segs[1] == "sweeps",
		n == 4 && segs[0] == "api" && segs[1] == "sweeps" && segs[3] == "retry":
		return pathSubmit // a sweep, or its retry, is one submission however many runs it makes
	case n == 2 && segs[0] == "api" && segs[1] == "pipelines",
		n == 4 && segs[0] == "api" && segs[1] == "pipelines" && segs[3] == "retry":
		return pathSubmit // so is a pipeline (issue 29)
	case n == 3 && segs[0] == "api" && segs[1] == "auth" &&
		(segs[2] == "login" || segs[2] == "register" || segs[2] == "logout"):
		return pathPublic
	case n == 3 && segs[0] == "api" && segs[1] == "monitor" && segs[2] == "health":
		return pathPublic
	case n >= 1 && segs[0] == "api":
		return pathPrivate
	}
	// The dashboard's login page and static files.
	switch segs[0] {
	case "login", "login.html", "favicon.ico", "robots.txt", "rlsched.py":
		if n == 1 {
			return pathPublic
		}
	case "assets", "static", "css", "js", "img", "fonts":
		if n >= 2 {
			return pathPublic
		}
	}
	return pathPrivate
}

// loginLocation is where a signed-out browser's navigation to a private
// path goes: the sign-in page, which returns to the dashboard page asked
// for (?next=, as the dashboard itself sends a signed-out reader; an
// unknown page then shows the dashboard's "Page not found"). An API path,
// a session's app or the root is no dashboard page to return to; the
// login page checks next again (safeNext), this only keeps it a path.
func loginLocation(segs []string, rawPath, query []byte) string {
	if len(segs) == 0 || segs[0] == "" || segs[0] == "api" || segs[0] == "sessions" {
		return "/login"
	}
	for _, s := range segs {
		if strings.ContainsAny(s, "\\\x00\r\n") {
			return "/login"
		}
	}
	next := string(rawPath)
	if len(query) > 0 {
		next += "?" + string(query)
	}
	return "/login?next=" + url.QueryEscape(next)
}

// isSessionPath: sign-in, registration or sign-out, which a page of another
// site must not make a browser do (login CSRF).
func isSessionPath(segs []string) bool {
	return len(segs) == 3 && segs[0] == "api" && segs[1] == "auth" &&
		(segs[2] == "login" || segs[2] == "register" || segs[2] == "logout")
}

// routeClass is the route label of a request's metrics.
func routeClass(st *reqState) obs.GatewayRoute {
	switch st.kind {
	case pathSubmit:
		return obs.GatewaySubmit
	case pathWS:
		return obs.GatewayWS
	case pathActuator:
		return obs.GatewayActuator
	}
	if len(st.segs) == 0 || st.segs[0] != "api" {
		return obs.GatewayUI
	}
	if st.kind == pathPublic {
		return obs.GatewayAuth
	}
	return obs.GatewayAPI
}
