package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// webApp is a small stdlib web app with a hand-written WebSocket echo (no
// PyPI here), standing in for a notebook: it serves under RLSCHED_BASE_URL
// on the loopback at RLSCHED_PORT, and misbehaves on request (cookies for
// other domains and for the site's sign-in, redirects off-site).
const webApp = `
import base64, hashlib, http.server, json, os, struct
PORT = int(os.environ['RLSCHED_PORT']); BASE = os.environ['RLSCHED_BASE_URL']
GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a): pass
    def send(self, code, body, ctype='text/plain', extra=()):
        b = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        for k, v in extra: self.send_header(k, v)
        self.send_header('Content-Type', ctype); self.send_header('Content-Length', str(len(b)))
        self.end_headers(); self.wfile.write(b)
    def do_GET(self):
        if not self.path.startswith(BASE): return self.send(404, 'not under my base: ' + self.path)
        r = self.path[len(BASE):]
        if r == '': return self.send(200, '<h1>hello from the app</h1>', 'text/html')
        if r == 'headers': return self.send(200, json.dumps({k.lower(): v for k, v in self.headers.items()}), 'application/json')
        if r == 'setcookie': return self.send(200, 'ok', extra=[('set-cookie', 'a=1; Domain=example.com; Path=/'),
            ('Set-Cookie', 'jwt_token=evil; Path=/'), ('Set-Cookie', 'b=2; Path=' + BASE + 'x')])
        if r == 'away': return self.send(302, '', extra=[('location', 'https://evil.example/steal')])  # any case
        if r == 'home': return self.send(302, '', extra=[('Location', '/elsewhere')])
        if r == 'big':
            n = 8 << 20; self.send_response(200); self.send_header('Content-Length', str(n)); self.end_headers()
            for _ in range(n // 65536): self.wfile.write(b'x' * 65536)
            return
        if r == 'ws': return self.ws()
        self.send(404, 'no ' + r)
    def do_POST(self):
        n = int(self.headers.get('Content-Length', '0')); self.send(200, b'posted:' + self.rfile.read(n))
    def ws(self):
        acc = base64.b64encode(hashlib.sha1((self.headers['Sec-WebSocket-Key'] + GUID).encode()).digest()).decode()
        self.send_response(101); self.send_header('Upgrade', 'websocket'); self.send_header('Connection', 'Upgrade')
        self.send_header('Sec-WebSocket-Accept', acc); self.end_headers(); self.wfile.flush()
        rf, msg, mop = self.rfile, b'', 1
        while True:
            h = rf.read(2)
            if len(h) < 2: return
            op, n = h[0] & 15, h[1] & 127
            if n == 126: n = struct.unpack('>H', rf.read(2))[0]
            elif n == 127: n = struct.unpack('>Q', rf.read(8))[0]
            mask = rf.read(4) if h[1] & 128 else b'\0\0\0\0'
            d = bytearray(rf.read(n))
            for i in range(n): d[i] ^= mask[i % 4]
            if op == 8: self.frame(8, bytes(d[:2])); return
            if op == 9: self.frame(10, bytes(d)); continue
            if op in (1, 2): mop, msg = op, bytes(d)
            elif op == 0: msg += bytes(d)
            if h[0] & 128 and op in (0, 1, 2): self.frame(mop, b'echo:' + msg); msg = b''  # a whole message
        self.close_connection = True
    def frame(self, op, d):
        n = len(d)
        if n < 126: h = struct.pack('>BB', 0x80 | op, n)
        elif n < 65536: h = struct.pack('>BBH', 0x80 | op, 126, n)
        else: h = struct.pack('>BBQ', 0x80 | op, 127, n)
        self.wfile.write(h + d); self.wfile.flush()
http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer(('127.0.0.1', PORT), H).serve_forever()
`

// freePort is a port free on this machine's loopback now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestNotebookSession (issue 34): an interactive run with a port serves a
// web app (HTTP and a WebSocket) at /sessions/<id>/ through the gateway,
// the master and the worker's connection, for its owner only; the app
// never sees the caller's token, cannot set cookies for the site or sign
// its owner out, nor redirect off-site; a client that stops reading does
// not hold the app; an ended session is 409 with its status; and
// rlsched notebook prints the URL.
func TestNotebookSession(t *testing.T) {
	b := newBed(t)
	up := b.startUp("up", filepath.Join(b.Dir, "data"))
	alice, _ := signup(t, up.URL, "alice", "ADMIN")
	bob, _ := signup(t, up.URL, "bob", "USER")

	port := freePort(t)
	id, _ := b.submit(bob, map[string]any{"kind": "interactive", "port": port, "command": []string{"python3", "-c", webApp}})
	bob.waitStatus(id, "RUNNING", 60*time.Second)
	base := "/sessions/" + id + "/"

	hc := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(c *client, path string, hdr ...string) response {
		t.Helper()
		r, err := rig.Do(hc, "GET", up.URL+path, c.Token, nil, hdr...)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return r
	}
	// The app takes a moment to listen: 502 until then, saying so.
	var r response
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		r = get(bob, base)
		return r.Status == 200, r.String()
	})
	if !strings.Contains(string(r.Body), "hello from the app") {
		t.Fatalf("the app's page: %s", r)
	}
	if r := get(bob, "/sessions/"+id); r.Status != 308 || r.Header.Get("Location") != base {
		t.Fatalf("the base without its slash: %d %v", r.Status, r.Header)
	}

	// Owner only: an admin too is refused; no token is 401.
	if r := get(alice, base); r.Status != 403 || !strings.Contains(string(r.Body), "only its owner") {
		t.Fatalf("alice opens bob's session: %s; want 403", r)
	}
	if r := get(&client{bob.As("")}, base, "Accept", "application/json"); r.Status != 401 {
		t.Fatalf("no token: %s; want 401", r)
	}
	if r := get(bob, "/sessions/no-such-run/"); r.Status != 404 {
		t.Fatalf("an unknown session: %s; want 404", r)
	}
	if r := get(bob, "/sessions/..%2Fapi/x"); r.Status != 400 {
		t.Fatalf("a malformed session id: %s; want 400", r)
	}
	var batch struct {
		ID string `json:"id"`
	}
	bob.Must("POST", "/api/train", map[string]any{"command": []string{"true"}, "port": 8888}, 400, nil)
	bob.Must("POST", "/api/train", map[string]any{"kind": "interactive", "port": 70000}, 400, nil)
	bob.Must("POST", "/api/train", map[string]any{"command": []string{"true"}}, 202, &batch)
	if r := get(bob, "/sessions/"+batch.ID+"/"); r.Status != 409 || !strings.Contains(string(r.Body), "no web app") {
		t.Fatalf("a batch run's session path: %s; want 409", r)
	}

	// The app never sees the token, nor the gateway's signed headers; the
	// browser's Host comes along (apps compare it to the Origin).
	r = get(bob, base+"headers", "Cookie", "jwt_token="+bob.Token+"; theirs=1", "Authorization", "Bearer "+bob.Token)
	var seen map[string]string
	r.JSON(t, &seen)
	for k, v := range seen {
		if strings.Contains(v, bob.Token) || strings.HasPrefix(k, "x-gateway-") || strings.HasPrefix(k, "x-user-") {
			t.Fatalf("the app saw %s: %q", k, v)
		}
	}
	if seen["cookie"] != "theirs=1" {
		t.Fatalf("the app's own cookie: %q, want theirs=1", seen["cookie"])
	}
	if u, _ := url.Parse(up.URL); seen["host"] != u.Host {
		t.Fatalf("the app saw Host %q, want %q", seen["host"], u.Host)
	}

	// Cookies: scoped to the app's path, no Domain, never jwt_token.
	r = get(bob, base+"setcookie")
	cookies := r.Header.Values("Set-Cookie")
	if len(cookies) != 2 {
		t.Fatalf("Set-Cookie: %q; want a and b", cookies)
	}
	for _, c := range cookies {
		lc := strings.ToLower(c)
		if strings.Contains(lc, "domain") || strings.HasPrefix(c, "jwt_token") || !strings.Contains(c, "path="+base) {
			t.Fatalf("Set-Cookie %q escapes the app's path", c)
		}
	}
	// Redirects: off-site refused, a path outside the base put under it.
	if r := get(bob, base+"away"); r.Status != 502 || r.Header.Get("Location") != "" || !strings.Contains(string(r.Body), "off this site") {
		t.Fatalf("an off-site redirect: %s %v; want 502", r, r.Header)
	}
	if r := get(bob, base+"home"); r.Status != 302 || r.Header.Get("Location") != base+"elsewhere" {
		t.Fatalf("a redirect to /elsewhere: %d %q; want %s", r.Status, r.Header.Get("Location"), base+"elsewhere")
	}

	// A POST signed in by the cookie must come from this site's pages.
	ck := "jwt_token=" + bob.Token
	if r, _ := rig.Do(hc, "POST", up.URL+base+"echo", "", "form=1", "Cookie", ck, "Content-Type", "application/x-www-form-urlencoded",
		"Origin", "https://evil.example"); r.Status != 403 {
		t.Fatalf("a cross-site POST by cookie: %s; want 403", r)
	}
	if r, _ := rig.Do(hc, "POST", up.URL+base+"echo", "", "form=1", "Cookie", ck, "Content-Type", "application/x-www-form-urlencoded",
		"Origin", up.URL); r.Status != 200 || string(r.Body) != "posted:form=1" {
		t.Fatalf("a same-site POST by cookie: %s; want the app's answer", r)
	}

	// A body larger than the window flows whole.
	if r := get(bob, base+"big"); r.Status != 200 || len(r.Body) != 8<<20 {
		t.Fatalf("8 MiB from the app: %d, %d bytes", r.Status, len(r.Body))
	}

	// The WebSocket: through the gateway, by cookie from this site's page.
	wsURL := "ws" + strings.TrimPrefix(up.URL, "http") + base + "ws"
	if _, resp, err := websocket.DefaultDialer.Dial(wsURL, http.Header{"Cookie": {ck}, "Origin": {"https://evil.example"}}); err == nil || resp == nil || resp.StatusCode != 403 {
		t.Fatalf("a cross-site WebSocket by cookie: %v %v; want 403", resp, err)
	}
	ws, _, err := websocket.DefaultDialer.Dial(wsURL, http.Header{"Cookie": {ck}, "Origin": {up.URL}})
	if err != nil {
		t.Fatalf("the app's WebSocket: %v", err)
	}
	defer ws.Close()
	for _, msg := range []string{"hi", strings.Repeat("y", 300<<10)} {
		if err := ws.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, got, err := ws.ReadMessage()
		if err != nil || string(got) != "echo:"+msg {
			t.Fatalf("echo of %d bytes: %v, %d bytes back", len(msg), err, len(got))
		}
	}

	// A client that asks for the big body and reads none of it: the app
	// goes on serving others meanwhile.
	slow, err := net.Dial("tcp", strings.TrimPrefix(up.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "GET %sbig HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", base, strings.TrimPrefix(up.URL, "http://"), bob.Token)
	if line, err := bufio.NewReader(slow).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("the slow client's answer: %q %v", line, err)
	}
	for range 5 {
		if r := get(bob, base); r.Status != 200 {
			t.Fatalf("beside a client that reads nothing: %s", r)
		}
	}

	// The CLI prints the session's URL.
	cfg := filepath.Join(b.Dir, "cli-config")
	if out, code := b.cli(cfg, "login", "-u", "bob", "-p", rig.Password, "--server", up.URL); code != 0 {
		t.Fatalf("rlsched login: exit %d\n%s", code, out)
	}
	out, code := b.cli(cfg, "notebook", "--port", fmt.Sprint(freePort(t)), "--server", up.URL, "--", "python3", "-c", webApp)
	m := regexp.MustCompile(`(?m)^(http://\S+/sessions/(\S+)/)$`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("rlsched notebook: exit %d, want 0 and the URL\n%s", code, out)
	}
	if !strings.HasPrefix(m[1], up.URL) {
		t.Fatalf("rlsched notebook printed %s, not under %s", m[1], up.URL)
	}
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		r := get(bob, "/sessions/"+m[2]+"/")
		return r.Status == 200, r.String()
	})
	bob.Must("POST", "/api/tasks/"+m[2]+"/cancel", nil, 202, nil)

	// The Python client: Client.notebook queues one, waits and gives the URL.
	scripts, _ := filepath.Abs(filepath.Join("..", "scripts"))
	appFile := filepath.Join(b.Dir, "app.py")
	if err := os.WriteFile(appFile, []byte(webApp), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := fmt.Sprintf(`import sys, rlsched
c = rlsched.Client(%q, token=%q)
rid, url = c.notebook(command=["python3", "-c", open(%q).read()], port=%d, timeout=60, poll=0.2)
print("RUN", rid); print("URL", url)
`, up.URL, bob.Token, appFile, freePort(t))
	cmd := exec.Command("python3", "-c", prog)
	cmd.Env = append(b.ServerEnv(), "PYTHONPATH="+scripts, "PYTHONDONTWRITEBYTECODE=1")
	pout, err := cmd.CombinedOutput()
	pm := regexp.MustCompile(`(?m)^URL (\S+)$`).FindStringSubmatch(string(pout))
	if rm := regexp.MustCompile(`(?m)^RUN (\S+)$`).FindStringSubmatch(string(pout)); rm != nil {
		b.track(rm[1])
	}
	if err != nil || pm == nil || !strings.HasPrefix(pm[1], up.URL+"/sessions/") {
		t.Fatalf("Client.notebook: %v\n%s", err, pout)
	}
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		r := get(bob, strings.TrimPrefix(pm[1], up.URL))
		return r.Status == 200, r.String()
	})

	// Ended: 409 with its status.
	bob.Must("POST", "/api/tasks/"+id+"/cancel", nil, 202, nil)
	bob.waitStatus(id, "CANCELLED", 60*time.Second)
	if r := get(bob, base); r.Status != 409 || !strings.Contains(string(r.Body), "CANCELLED") {
		t.Fatalf("an ended session: %s; want 409 naming CANCELLED", r)
	}
}
