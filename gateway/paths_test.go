package gateway

import (
	"fmt"
	"testing"
)

func TestClassify(t *testing.T) {
	f := func(path string, want pathKind) {
		t.Helper()
		got, _, ok := classify([]byte(path))
		if !ok || got != want {
			t.Errorf("classify(%q) = %v, %v; want %v", path, got, ok, want)
		}
	}
	f("/api/train", pathSubmit)
	f("/api/%74rain", pathSubmit) // the master unescapes segments too
	f("/api/train/", pathPrivate)
	f("/api/tasks/r1/rerun", pathSubmit) // a rerun is a submission (issue 12)
	f("/api/tasks/r%31/re%72un", pathSubmit)
	f("/api/tasks/r1/cancel", pathPrivate)
	f("/api/tasks/r1/rerun/x", pathPrivate)
	f("/api/sweeps", pathSubmit) // a sweep is one submission (issue 17)
	f("/api/sweeps/s1/retry", pathSubmit)
	f("/api/sweeps/s1/cancel", pathPrivate)
	f("/api/sweeps/s1", pathPrivate)
	f("/rlsched.py", pathPublic)
	f("//api/train", pathPrivate)
	f("/api%2Ftrain", pathPrivate) // one segment "api/train" for the master: not its submit route
	f("/api/auth/login", pathPublic)
	f("/api/auth/register", pathPublic)
	f("/api/auth/logout", pathPublic)
	f("/api/auth/me", pathPrivate)
	f("/api/monitor/health", pathPublic)
	f("/api/monitor/logs/x", pathPrivate)
	f("/login", pathPublic)
	f("/static/app.js", pathPublic)
	f("/static", pathPrivate)
	f("/", pathPrivate)
	f("/runs/r1", pathPrivate)
	f("/sessions/r1/", pathApp) // a session's web app (issue 34): token required, WebSockets too
	f("/sessions/r1/lab/tree", pathApp)
	f("/sessions", pathPrivate)
	f("/ws", pathWS)
	f("/ws/sessions/r1", pathWS)
	f("/api/tasks/r1/terminal", pathWS)
	f("/ws/sessions", pathPrivate)
	f("/metrics", pathMetrics)
	f("/gateway-actuator/health", pathActuator)
	if _, _, ok := classify([]byte("/api/%zz")); ok {
		t.Error("a malformed escape is accepted")
	}
}

func TestRequestPath(t *testing.T) {
	f := func(uri, want string, wantOK bool) {
		t.Helper()
		got, ok := requestPath([]byte(uri))
		if string(got) != want || ok != wantOK {
			t.Errorf("requestPath(%q) = %q, %v", uri, got, ok)
		}
	}
	f("/api/tasks?limit=5", "/api/tasks", true)
	f("/a#frag", "/a", true)
	f("/", "/", true)
	f("http://evil/api/tasks", "", false)
	f("*", "", false)
}

// TestLoggedURI (issue 25): the access log never holds a token sent in
// the query (WebSockets send ?token=), under any spelling of its name.
func TestLoggedURI(t *testing.T) {
	f := func(uri, want string) {
		t.Helper()
		if got := loggedURI([]byte(uri)); got != want {
			t.Errorf("loggedURI(%q) = %q, want %q", uri, got, want)
		}
	}
	f("/api/tasks?limit=5", "/api/tasks?limit=5")
	f("/ws?token=eyJhbGc.x.y", "/ws?token=***")
	f("/ws?a=1&TOKEN=eyJ&b=2", "/ws?a=1&TOKEN=***&b=2")
	f("/ws?%74oken=eyJ", "/ws?%74oken=***")
	f("/ws?access_token=x&jwt=y", "/ws?access_token=***&jwt=***")
	f("/ws?%zz=x", "/ws?%zz=***")
	f("/ws?token", "/ws?token")
	f("/plain", "/plain")
}

func TestValidTraceID(t *testing.T) {
	for s, want := range map[string]bool{"abc-DEF_123": true, "": false, "a b": false, "ü": false,
		fmt.Sprintf("%064d", 0): true, fmt.Sprintf("%065d", 0): false} {
		if validTraceID([]byte(s)) != want {
			t.Errorf("validTraceID(%q) != %v", s, want)
		}
	}
}

func TestCanaryBucketStable(t *testing.T) {
	// Pinned values (FNV-1a 32, mod 100): every gateway, old or new, must
	// split alike.
	for key, want := range map[string]uint32{"": 61, "1": 44, "42": 11, "alice": 79} {
		if got := canaryBucket(key); got != want {
			t.Errorf("canaryBucket(%q) = %d, want %d", key, got, want)
		}
	}
}
