package httpapi

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
)

// The rules a session's app is held to (issue 34): its redirects stay on
// this site under its path, its cookies are scoped to its path.
func TestAppLocation(t *testing.T) {
	const base, site = "/sessions/r1/", "rl.example:8080"
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"/sessions/r1/lab", "/sessions/r1/lab", true},
		{"/sessions/r1", "/sessions/r1", true},
		{"/login?next=/x", "/sessions/r1/login?next=/x", true},
		{"/sessions/r2/steal", "/sessions/r1/sessions/r2/steal", true},
		{"lab/tree", "lab/tree", true},
		{"http://rl.example:8080/sessions/r1/x", "/sessions/r1/x", true},
		{"https://evil.example/", "", false},
		{"//evil.example/x", "", false},
		{"javascript:alert(1)", "", false},
		{"http://rl.example:9090/", "", false},
	} {
		got, ok := appLocation(c.in, base, site)
		if ok != c.ok || got != c.want {
			t.Errorf("appLocation(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestAppResponseScopesCookies(t *testing.T) {
	var resp fasthttp.Response
	resp.Header.Add("Set-Cookie", "a=1; Domain=rl.example; Path=/")
	resp.Header.Add("Set-Cookie", "jwt_token=evil; Path=/sessions/r1/")
	resp.Header.Add("Set-Cookie", "b=2; Path=/sessions/r1/lab; HttpOnly")
	resp.Header.Add("Set-Cookie", "c=3")
	if e := appResponse(&resp, "r1", "rl.example"); e != nil {
		t.Fatal(e)
	}
	got := map[string]string{}
	resp.Header.VisitAllCookie(func(k, v []byte) { got[string(k)] = string(v) })
	if _, ok := got["jwt_token"]; ok || len(got) != 3 {
		t.Fatalf("cookies %v: want a, b and c, never jwt_token", got)
	}
	for k, v := range got {
		if strings.Contains(strings.ToLower(v), "domain=") || !strings.Contains(v, "path=/sessions/r1/") {
			t.Errorf("cookie %s = %q escapes /sessions/r1/", k, v)
		}
	}
	if !strings.Contains(got["b"], "path=/sessions/r1/lab") || !strings.Contains(strings.ToLower(got["b"]), "httponly") {
		t.Errorf("a cookie already under the app's path changed: %q", got["b"])
	}
	resp.Reset()
	resp.Header.Set("Location", "https://evil.example/")
	if e := appResponse(&resp, "r1", "rl.example"); e == nil || e.Status != 502 {
		t.Fatalf("an off-site redirect: %v, want 502", e)
	}
}

// tcpApps is a SessionApps whose streams are TCP connections to a local
// server (the worker's side, without a worker).
type tcpApps struct{ addr string }

func (a tcpApps) DialSession(ctx context.Context, id string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", a.addr)
}

// TestSessionApp_Direct: the proxy on the master itself (go test -race):
// an HTTP answer streamed, the token kept from the app, a WebSocket
// relayed both ways, refusals before the app is asked.
func TestSessionApp_Direct(t *testing.T) {
	up := websocket.Upgrader{}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/ws"):
			c, err := up.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			defer c.Close()
			for {
				typ, b, err := c.ReadMessage()
				if err != nil {
					return
				}
				_ = c.WriteMessage(typ, append([]byte("echo:"), b...))
			}
		default:
			fmt.Fprintf(w, "path=%s auth=%q cookie=%q", r.URL.RequestURI(), r.Header.Get("Authorization"), r.Header.Get("Cookie"))
		}
	}))
	defer app.Close()
	e := newEnvWith(t, func(c *Config) { c.Apps = tcpApps{strings.TrimPrefix(app.URL, "http://")} })
	tok, _ := e.user("alice")
	other, _ := e.user("bob")
	id := e.submit(tok, `{"kind":"interactive","port":8888}`)
	e.finish(id, core.StatusRunning)
	base := "/sessions/" + id + "/"

	r := e.req("GET", base+"x?q=1", tok, nil, "Cookie", "jwt_token="+tok+"; mine=1")
	if r.status != 200 || string(r.body) != `path=`+base+`x?q=1 auth="" cookie="mine=1"` {
		t.Fatalf("the app's answer: %d %s", r.status, r.body)
	}
	r = e.req("GET", base, "", nil, "Authorization", "token app-secret", "Cookie", "jwt_token="+tok)
	if r.status != 200 || !strings.Contains(string(r.body), `auth="token app-secret"`) {
		t.Fatalf("the app's own Authorization scheme, by cookie: %d %s", r.status, r.body)
	}
	if r := e.req("GET", base, other, nil); r.status != http.StatusForbidden {
		t.Fatalf("another user: %d %s", r.status, r.body)
	}
	batch := e.submit(tok, `{"command":["x"]}`)
	e.finish(batch, core.StatusRunning)
	if r := e.req("GET", "/sessions/"+batch+"/", tok, nil); r.status != http.StatusConflict {
		t.Fatalf("a batch run: %d %s", r.status, r.body)
	}

	c, _, err := websocket.DefaultDialer.Dial("ws://"+e.addr+base+"ws", http.Header{"Authorization": {"Bearer " + tok}})
	if err != nil {
		t.Fatalf("the app's WebSocket: %v", err)
	}
	defer c.Close()
	for _, msg := range []string{"hi", strings.Repeat("z", 1<<20)} {
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, b, err := c.ReadMessage()
		if err != nil || string(b) != "echo:"+msg {
			t.Fatalf("echo of %d bytes: %v, %d back", len(msg), err, len(b))
		}
	}
	e.finish(id, core.StatusSucceeded)
	if r := e.req("GET", base, tok, nil); r.status != http.StatusConflict || !strings.Contains(string(r.body), "SUCCEEDED") {
		t.Fatalf("an ended session: %d %s", r.status, r.body)
	}
}
