package gateway_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/gateway"
)

// TestGatewayHostChecked (issue 12): a request under a name that is not the
// gateway's (DNS rebinding) is refused 421 with the error body and never
// reaches a master; the gateway's own names pass, and PublicHosts adds more.
func TestGatewayHostChecked(t *testing.T) {
	up, seen := recordUpstream(t)
	_, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour, PublicHosts: []string{"rlsched.lab.example"}}, []string{up}, nil)
	addr := strings.TrimPrefix(gwURL, "http://")
	_, port, _ := net.SplitHostPort(addr)
	tok := testToken(t, 1, "alice", "USER")
	for _, host := range []string{"evil.example", "evil.example:" + port, "localhost:1"} {
		a := do(t, "POST", gwURL+"/api/auth/login", `{"username":"a","password":"b"}`, "Host", host)
		var e struct {
			Error struct{ Code, Message, TraceID string }
		}
		a.JSON(t, &e)
		if a.Status != 421 || e.Error.Code != "misdirected_request" || e.Error.TraceID == "" {
			t.Errorf("Host %q: %d %s", host, a.Status, a.Body)
		}
		if a := do(t, "GET", gwURL+"/api/tasks", "", append(bearer(tok), "Host", host)...); a.Status != 421 {
			t.Errorf("Host %q with a token: %d %s", host, a.Status, a.Body)
		}
	}
	for _, host := range []string{addr, "localhost:" + port, "rlsched.lab.example", "rlsched.lab.example:8443"} {
		if a := do(t, "GET", gwURL+"/api/tasks", "", append(bearer(tok), "Host", host)...); a.Status != 200 {
			t.Errorf("Host %q: %d %s", host, a.Status, a.Body)
		}
		<-seen
	}
	// Monitoring answers under whatever name a prober uses.
	for _, p := range []string{"/metrics", "/gateway-actuator/health"} {
		if a := do(t, "GET", gwURL+p, "", "Host", "prometheus-target.internal"); a.Status != 200 {
			t.Errorf("%s under another name: %d", p, a.Status)
		}
	}
	select {
	case h := <-seen:
		t.Fatalf("a refused request reached the upstream: %v", h)
	default:
	}
}

// TestGatewayCSRF (issue 12): at the gateway too, a state-changing request
// signed in by the cookie must be JSON from this site's pages, and a
// browser's sign-in or registration must come from this site; Bearer
// requests pass. Refusals never reach a master.
func TestGatewayCSRF(t *testing.T) {
	up, seen := recordUpstream(t)
	_, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour, RateLimitDisabled: true}, []string{up}, nil)
	tok := testToken(t, 1, "alice", "USER")
	cookie := []string{"Cookie", "jwt_token=" + tok}
	f := func(name string, want int, path, body string, hdr ...string) {
		t.Helper()
		a := do(t, "POST", gwURL+path, body, hdr...)
		if a.Status != want {
			t.Errorf("%s: %d, want %d (%s)", name, a.Status, want, a.Body)
			return
		}
		if want == 403 {
			var e struct{ Error struct{ Code string } }
			a.JSON(t, &e)
			if e.Error.Code != "forbidden" {
				t.Errorf("%s: %s", name, a.Body)
			}
			return
		}
		<-seen
	}
	run := `{"command":["true"]}`
	f("cross-origin cookie POST", 403, "/api/train", run, append(cookie, "Origin", "http://evil.example")...)
	f("a form's content type", 403, "/api/train", run, append(cookie, "Content-Type", "text/plain", "Origin", gwURL)...)
	f("no origin", 403, "/api/train", run, cookie...)
	f("cross-site cancel", 403, "/api/tasks/r1/cancel", "", append(cookie, "Sec-Fetch-Site", "cross-site")...)
	f("login from another site", 403, "/api/auth/login", `{"username":"a","password":"b"}`, "Origin", "http://evil.example")
	f("register as a form", 403, "/api/auth/register", `{"username":"a","password":"b"}`, "Content-Type", "text/plain", "Origin", gwURL)

	f("same origin", 200, "/api/train", run, append(cookie, "Origin", gwURL)...)
	f("fetch metadata", 200, "/api/train", run, append(cookie, "Sec-Fetch-Site", "same-origin")...)
	f("bearer from another origin", 200, "/api/train", run, append(bearer(tok), "Origin", "http://evil.example")...)
	f("CLI login", 200, "/api/auth/login", `{"username":"a","password":"b"}`)
	select {
	case h := <-seen:
		t.Fatalf("a refused request reached the upstream: %v", h)
	default:
	}
}
