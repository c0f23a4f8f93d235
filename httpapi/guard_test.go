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

// TestCSRF (issue 12): a state-changing request signed in by the cookie
// must be JSON and come from this site (Origin, or Sec-Fetch-Site:
// same-origin); one with a Bearer token is not affected. Login, register and
// logout from a browser follow the rule too (login CSRF).
func TestCSRF(t *testing.T) {
	e := newGatewayEnv(t, false)
	tok, _ := e.user("alice")
	body := map[string]any{"command": []string{"true"}}
	cookie := func(more ...string) []string { return append([]string{"Cookie", "jwt_token=" + tok}, more...) }
	json := "application/json"
	f := func(name string, want int, path, token string, body any, hdr ...string) {
		t.Helper()
		r := e.req("POST", path, token, body, hdr...)
		if r.status != want {
			t.Errorf("%s: %d, want %d (%s)", name, r.status, want, r.body)
		} else if want == 403 && r.errCode(t) != "forbidden" {
			t.Errorf("%s: code %s", name, r.errCode(t))
		}
	}
	// Refused: what a page of another site can make a browser send.
	f("cross-origin cookie POST", 403, "/api/train", "", body, cookie("Content-Type", json, "Origin", "http://evil.example")...)
	f("cross-site fetch metadata", 403, "/api/train", "", body, cookie("Content-Type", json, "Sec-Fetch-Site", "cross-site")...)
	f("a form's content type", 403, "/api/train", "", `{"command":["true"]}`, cookie("Content-Type", "text/plain", "Origin", e.url)...)
	f("no content type", 403, "/api/train", "", `{"command":["true"]}`, cookie("Origin", e.url)...)
	f("no origin at all", 403, "/api/train", "", body, cookie("Content-Type", json)...)
	f("origin null", 403, "/api/train", "", body, cookie("Content-Type", json, "Origin", "null")...)
	f("another port", 403, "/api/train", "", body, cookie("Content-Type", json, "Origin", "http://127.0.0.1:1")...)
	f("cancel without a body", 403, "/api/tasks/r1/cancel", "", nil, cookie("Origin", "http://evil.example")...)
	f("login CSRF", 403, "/api/auth/login", "", `{"username":"alice","password":"password-alice"}`,
		"Content-Type", "text/plain", "Origin", "http://evil.example")
	f("login from another site", 403, "/api/auth/login", "", map[string]string{"username": "alice", "password": "password-alice"},
		"Content-Type", json, "Origin", "http://evil.example")
	f("register from another site", 403, "/api/auth/register", "", map[string]string{"username": "mallory", "password": "mallory-pw"},
		"Content-Type", json, "Sec-Fetch-Site", "cross-site")
	f("logout from another site", 403, "/api/auth/logout", "", nil, cookie("Origin", "http://evil.example")...)
	if _, err := e.st.UserByName(t.Context(), "mallory"); err == nil {
		t.Error("a cross-site registration created the user")
	}

	// Allowed: the dashboard's own requests, and every Bearer request.
	f("same origin", 202, "/api/train", "", body, cookie("Content-Type", json, "Origin", e.url)...)
	f("same origin, charset", 202, "/api/train", "", body, cookie("Content-Type", "application/json; charset=utf-8", "Origin", e.url)...)
	f("fetch metadata same-origin", 202, "/api/train", "", body, cookie("Content-Type", json, "Sec-Fetch-Site", "same-origin")...)
	f("bearer, no origin", 202, "/api/train", tok, body)
	f("bearer from another origin", 202, "/api/train", tok, body, "Origin", "http://evil.example")
	f("CLI login", 200, "/api/auth/login", "", map[string]string{"username": "alice", "password": "password-alice"})
	f("dashboard login", 200, "/api/auth/login", "", map[string]string{"username": "alice", "password": "password-alice"},
		"Content-Type", json, "Origin", e.url)
	// Through the gateway, this site is the Host the client used, which
	// the gateway signed.
	hdr := signedBodyHost(testGatewaySecret, "POST", "/api/auth/login", `{"username":"alice","password":"password-alice"}`,
		"rlsched.lab.example:8081", "gw2", e.clock.Now())
	f("through the gateway", 200, "/api/auth/login", "", `{"username":"alice","password":"password-alice"}`,
		append(hdr, "Content-Type", json, "Origin", "http://rlsched.lab.example:8081")...)
	hdr = signedBodyHost(testGatewaySecret, "POST", "/api/auth/login", `{"username":"alice","password":"password-alice"}`,
		"rlsched.lab.example:8081", "gw3", e.clock.Now())
	f("through the gateway, from another site", 403, "/api/auth/login", "", `{"username":"alice","password":"password-alice"}`,
		append(hdr, "Content-Type", json, "Origin", "http://evil.example")...)
}
