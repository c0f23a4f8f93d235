package httpapi

import (
	"strings"
	"testing"

	"github.com/rlsched/rlsched/notify"
)

// TestNotificationSettings: a user sets, reads and clears their webhook;
// other schemes, unknown events and hosts of the master's network (unless
// NOTIFY_ALLOW_HOSTS names them) are 400 with a reason.
func TestNotificationSettings(t *testing.T) {
	targets, err := notify.ParseTargets("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, func(c *Config) { c.NotifyTargets = targets })
	tok, _ := e.user("alice")
	put := func(body string, want int, has string) resp {
		t.Helper()
		r := e.req("PUT", "/api/auth/me/notifications", tok, body)
		if r.status != want || !strings.Contains(string(r.body), has) {
			t.Fatalf("PUT %s: %d %s, want %d with %q", body, r.status, r.body, want, has)
		}
		return r
	}
	if r := e.req("GET", "/api/auth/me/notifications", tok, nil); r.status != 200 || string(r.body) != `{"webhook":"","on":[]}` {
		t.Fatalf("GET before any: %d %s", r.status, r.body)
	}
	put(`{"webhook":"http://127.0.0.1:9/hook","on":["FAILED","idle_gpu","FAILED"]}`, 200, `"on":["FAILED","idle_gpu"]`)
	if r := e.req("GET", "/api/auth/me/notifications", tok, nil); string(r.body) != `{"webhook":"http://127.0.0.1:9/hook","on":["FAILED","idle_gpu"]}` {
		t.Fatalf("GET: %s", r.body)
	}
	put(`{"webhook":"http://127.0.0.1:9/hook"}`, 200, `"on":["SUCCEEDED","FAILED","TIMEOUT","CANCELLED"]`)
	put(`{"webhook":"ftp://127.0.0.1/x"}`, 400, "http:// or https://")
	put(`{"webhook":"http://127.0.0.1:9/x","on":["EXPLODED"]}`, 400, "unknown event")
	put(`{"webhook":"http://10.0.0.1/x"}`, 400, "NOTIFY_ALLOW_HOSTS")
	put(`{"webhook":42}`, 400, "webhook")
	put(`{"webhook":""}`, 200, `{"webhook":"","on":[]}`)
	if r := e.req("PUT", "/api/auth/me/notifications", "", `{"webhook":""}`); r.status != 401 {
		t.Fatalf("without a token: %d", r.status)
	}

	open := newEnv(t) // no NOTIFY_ALLOW_HOSTS: the master's own network is refused
	tok, _ = open.user("bob")
	if r := open.req("PUT", "/api/auth/me/notifications", tok, `{"webhook":"http://127.0.0.1:9/hook"}`); r.status != 400 ||
		!strings.Contains(string(r.body), "loopback") {
		t.Fatalf("a loopback webhook without NOTIFY_ALLOW_HOSTS: %d %s", r.status, r.body)
	}
}
