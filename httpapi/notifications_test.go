package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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

// TestNotificationTest: POST .../notifications/test sends one message to
// the caller's webhook now and says whether it took it; without a webhook
// it is a 409 saying how to set one.
func TestNotificationTest(t *testing.T) {
	targets, err := notify.ParseTargets("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	var status atomic.Int32
	status.Store(204)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
		w.WriteHeader(int(status.Load()))
	}))
	defer hook.Close()
	e := newEnvWith(t, func(c *Config) { c.NotifyTargets = targets })
	tok, _ := e.user("alice")
	if r := e.req("POST", "/api/auth/me/notifications/test", tok, nil); r.status != 409 || !strings.Contains(string(r.body), "no webhook is set") {
		t.Fatalf("test without a webhook: %d %s", r.status, r.body)
	}
	if r := e.req("PUT", "/api/auth/me/notifications", tok, `{"webhook":"`+hook.URL+`/h"}`); r.status != 200 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	if r := e.req("POST", "/api/auth/me/notifications/test", tok, nil); r.status != 200 || !strings.Contains(string(r.body), `"sent":true`) {
		t.Fatalf("test: %d %s", r.status, r.body)
	}
	if b := <-got; !strings.Contains(b, `"text":"rlsched: a test notification for alice`) {
		t.Errorf("the hook got %s", b)
	}
	status.Store(500)
	if r := e.req("POST", "/api/auth/me/notifications/test", tok, nil); r.status != 200 ||
		!strings.Contains(string(r.body), `"sent":false`) || !strings.Contains(string(r.body), "answered 500") {
		t.Fatalf("test of a failing hook: %d %s", r.status, r.body)
	}
	if r := e.req("POST", "/api/auth/me/notifications/test", "", nil); r.status != 401 {
		t.Fatalf("without a token: %d", r.status)
	}
}
