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
		a.json(t, &e)
		if a.status != 421 || e.Error.Code != "misdirected_request" || e.Error.TraceID == "" {
			t.Errorf("Host %q: %d %s", host, a.status, a.body)
		}
		if a := do(t, "GET", gwURL+"/api/tasks", "", append(bearer(tok), "Host", host)...); a.status != 421 {
			t.Errorf("Host %q with a token: %d %s", host, a.status, a.body)
		}
	}
	for _, host := range []string{addr, "localhost:" + port, "rlsched.lab.example", "rlsched.lab.example:8443"} {
		if a := do(t, "GET", gwURL+"/api/tasks", "", append(bearer(tok), "Host", host)...); a.status != 200 {
			t.Errorf("Host %q: %d %s", host, a.status, a.body)
		}
		<-seen
	}
	// Monitoring answers under whatever name a prober uses.
	for _, p := range []string{"/metrics", "/gateway-actuator/health"} {
		if a := do(t, "GET", gwURL+p, "", "Host", "prometheus-target.internal"); a.status != 200 {
			t.Errorf("%s under another name: %d", p, a.status)
		}
	}
	select {
	case h := <-seen:
		t.Fatalf("a refused request reached the upstream: %v", h)
	default:
	}
}
