package httpapi

import (
	"net"
	"strings"
	"testing"
)

// TestHostChecked (issue 12): a request under a name that is not this
// master's (a DNS-rebinding page) is refused 421 with the error body;
// loopback names and the bound address with the port are its own by
// default; a request the gateway signed is the gateway's to check; the
// monitoring endpoints answer under any name.
func TestHostChecked(t *testing.T) {
	e := newGatewayEnv(t, false)
	_, port, _ := net.SplitHostPort(e.addr)
	tok, id := e.user("alice")
	for _, host := range []string{"evil.example", "evil.example:" + port, "127.0.0.1:1", "localhost.evil.example:" + port} {
		r := e.req("GET", "/api/auth/me", tok, nil, "Host", host)
		if r.status != 421 || r.errCode(t) != "misdirected_request" {
			t.Errorf("Host %q: %d %s", host, r.status, r.body)
		}
	}
	if r := e.req("POST", "/api/auth/register", "", map[string]string{"username": "mallory", "password": "mallory-pw"},
		"Host", "evil.example:"+port); r.status != 421 {
		t.Errorf("register under a rebound name: %d %s", r.status, r.body)
	}
	for _, host := range []string{e.addr, "localhost:" + port, "LOCALHOST.:" + port, "[::1]:" + port} {
		if r := e.req("GET", "/api/auth/me", tok, nil, "Host", host); r.status != 200 {
			t.Errorf("Host %q: %d %s", host, r.status, r.body)
		}
	}
	if r := e.req("GET", "/", "", nil, "Host", "evil.example"); r.status != 421 {
		t.Errorf("the dashboard under a rebound name: %d", r.status)
	}
	if r := e.req("GET", "/api/monitor/health", "", nil, "Host", "prometheus-target.internal"); r.status != 200 {
		t.Errorf("health under another name: %d %s", r.status, r.body)
	}
	hdr := append(signed(testGatewaySecret, "GET", "/api/auth/me", "t1", e.clock.Now(), id, "alice", "USER"), "Host", "master-7.internal")
	if r := e.req("GET", "/api/auth/me", "", nil, hdr...); r.status != 200 {
		t.Errorf("gateway-signed under the gateway's name for the master: %d %s", r.status, r.body)
	}
}

// TestPublicHostsConfigured: PUBLIC_HOSTS adds names (with or without a
// port); "*" turns the check off; a malformed name is refused at start.
func TestPublicHostsConfigured(t *testing.T) {
	e := newEnvWith(t, func(c *Config) { c.PublicHosts = []string{"rlsched.lab.example", "gpu-box:9999"} })
	tok, _ := e.user("alice")
	f := func(host string, want int) {
		t.Helper()
		if r := e.req("GET", "/api/auth/me", tok, nil, "Host", host); r.status != want {
			t.Errorf("Host %q: %d, want %d (%s)", host, r.status, want, r.body)
		}
	}
	f("rlsched.lab.example", 200)
	f("rlsched.lab.example:443", 200)
	f("gpu-box:9999", 200)
	f("gpu-box:9998", 421)
	f(e.addr, 200)
	f("evil.example", 421)

	off := newEnvWith(t, func(c *Config) { c.PublicHosts = []string{"*"} })
	tok, _ = off.user("alice")
	if r := off.req("GET", "/api/auth/me", tok, nil, "Host", "anything.example"); r.status != 200 {
		t.Errorf("with PUBLIC_HOSTS=*: %d %s", r.status, r.body)
	}

	cfg := Config{JWTSecret: testSecret, PublicHosts: []string{"http://x/"}}
	if _, err := New(cfg, e.st, e.ctl); err == nil || !strings.Contains(err.Error(), "PUBLIC_HOSTS") {
		t.Errorf("a URL in PUBLIC_HOSTS: %v", err)
	}
}
