package gateway_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/gateway"
	"github.com/rlsched/rlsched/gateway/discovery"
	"github.com/rlsched/rlsched/internal/signature"
	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

func TestProxyStreamsLargeResponse(t *testing.T) {
	const chunk, chunks = 1 << 20, 24
	var want [sha256.Size]byte
	{
		h := sha256.New()
		for i := 0; i < chunks; i++ {
			h.Write(bytes.Repeat([]byte{byte('a' + i%26)}, chunk))
		}
		copy(want[:], h.Sum(nil))
	}
	up := upstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/octet-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for i := 0; i < chunks; i++ {
				_, _ = w.Write(bytes.Repeat([]byte{byte('a' + i%26)}, chunk))
				_ = w.Flush()
				time.Sleep(60 * time.Millisecond) // ≈ 1.5 s in all, thrice the timeout
			}
		})
	})
	_, gwURL := startGW(t, gateway.Config{UpstreamTimeout: 500 * time.Millisecond, HealthInterval: time.Hour}, []string{up}, nil)
	req, _ := http.NewRequest("GET", gwURL+"/api/tasks/r1/artifacts/model.bin", nil)
	req.Header.Set("Authorization", "Bearer "+testToken(t, 1, "alice", "USER"))
	start := time.Now()
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		t.Fatalf("after %d bytes: %v", n, err)
	}
	if n != chunk*chunks || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("got %d bytes (want %d), digest equal: %v", n, chunk*chunks, bytes.Equal(h.Sum(nil), want[:]))
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("the body came in %v: the upstream did not stream slowly, the test proves nothing", d)
	}
}

// TestProxyRefusesLargeRequestBody: a body over the API's 1 MiB is answered
// 413 payload_too_large by the gateway itself, declared or chunked, and the
// upstream never sees it (it used to be streamed there and come back as the
// fallback's 503). A client that sends all of it before reading can do so
// and then read the answer (the connection lingers; internal/linger).
func TestProxyRefusesLargeRequestBody(t *testing.T) {
	var reached atomic.Int32
	up := upstream(t, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/api/train" {
			reached.Add(1)
		}
	})
	_, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour}, []string{up}, nil)
	tok := testToken(t, 1, "alice", "USER")
	body := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16) // 3 MiB
	for _, chunked := range []bool{false, true} {
		var r io.Reader = bytes.NewReader(body)
		if chunked {
			r = io.MultiReader(r) // unknown length: Transfer-Encoding: chunked
		}
		req, _ := http.NewRequest("POST", gwURL+"/api/train", r)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatalf("chunked=%v: %v", chunked, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct{ Code, Message string }
		}
		if resp.StatusCode != 413 || json.Unmarshal(got, &e) != nil || e.Error.Code != "payload_too_large" {
			t.Fatalf("chunked=%v: %d %q, want 413 payload_too_large", chunked, resp.StatusCode, got)
		}
	}
	// Sent whole before reading, larger than loopback's socket buffers.
	big := bytes.Repeat([]byte("x"), 12<<20)
	addr := strings.TrimPrefix(gwURL, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := fmt.Fprintf(c, "POST /api/train HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		addr, tok, len(big), big); err != nil {
		t.Fatalf("the connection broke while sending: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || !bytes.Contains(got, []byte(`"payload_too_large"`)) {
		t.Fatalf("%d %q", resp.StatusCode, got)
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the upstream saw %d oversized requests", n)
	}
}

func TestProxyHopByHopAndForwardedHeaders(t *testing.T) {
	seen := make(chan http.Header, 16)
	up := upstream(t, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Request.Header.Peek("X-Trace-Id")) == "gateway-health-check" {
			return
		}
		h := http.Header{}
		for k, v := range ctx.Request.Header.All() {
			h.Add(string(k), string(v))
		}
		seen <- h
		ctx.Response.Header.Set("Connection", "X-Up-Private")
		ctx.Response.Header.Set("X-Up-Private", "secret")
		ctx.Response.Header.Set("Keep-Alive", "timeout=5")
		ctx.Response.Header.Set("Proxy-Authenticate", "Basic")
		ctx.Response.Header.Set("X-Kept", "yes")
		ctx.SetBodyString("ok")
	})
	_, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour, PublicHosts: []string{"dashboard.example:8081"}}, []string{up}, nil)
	a := do(t, "GET", gwURL+"/api/tasks", "", append(bearer(testToken(t, 1, "alice", "USER")),
		"Connection", "keep-alive, X-Client-Private", "X-Client-Private", "1", "Keep-Alive", "timeout=9",
		"Proxy-Authorization", "Basic Zm9vOmJhcg==", "TE", "trailers", "X-Forwarded-For", "10.1.2.3",
		"Host", "dashboard.example:8081")...)
	if a.Status != 200 {
		t.Fatalf("%d %s", a.Status, a.Body)
	}
	h := <-seen
	for _, k := range []string{"X-Client-Private", "Keep-Alive", "Proxy-Authorization", "Te"} {
		if v := h.Get(k); v != "" {
			t.Errorf("the upstream got hop-by-hop %s: %q", k, v)
		}
	}
	if got := h.Get("X-Forwarded-For"); got != "10.1.2.3, 127.0.0.1" {
		t.Errorf("X-Forwarded-For %q", got)
	}
	if got := h.Get("X-Forwarded-Host"); got != "dashboard.example:8081" {
		t.Errorf("X-Forwarded-Host %q", got)
	}
	// The master is addressed by its own name, as by any plain proxy; the
	// client's Host travels in X-Forwarded-Host, under the signature.
	if got := h.Get("Host"); got != strings.TrimPrefix(up, "http://") {
		t.Errorf("Host %q, want the upstream's %s", got, up)
	}
	if got := h.Get("X-Forwarded-Proto"); got != "http" {
		t.Errorf("X-Forwarded-Proto %q", got)
	}
	for _, k := range []string{"X-Up-Private", "Keep-Alive", "Proxy-Authenticate"} {
		if v := a.Header.Get(k); v != "" {
			t.Errorf("the client got hop-by-hop %s: %q", k, v)
		}
	}
	if a.Header.Get("X-Kept") != "yes" {
		t.Errorf("an end-to-end header was lost: %v", a.Header)
	}
}

// resetUpstream closes every connection as soon as a request arrives.
func resetUpstream(t testing.TB, hits *atomic.Int32) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, 4096)
				if n, _ := c.Read(buf); n > 0 && !bytes.Contains(buf[:n], []byte("/api/monitor/health")) {
					hits.Add(1)
				}
				c.Close()
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

func TestRetriesOnlyIdempotent(t *testing.T) {
	tok := bearer(testToken(t, 1, "alice", "USER"))
	t.Run("GET goes to the next instance", func(t *testing.T) {
		var hits atomic.Int32
		bad := resetUpstream(t, &hits)
		good := okUpstream(t, "good")
		_, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour}, []string{bad, good}, nil)
		for i := 0; i < 6; i++ {
			if a := do(t, "GET", gwURL+"/api/tasks", "", tok...); a.Status != 200 || string(a.Body) != "good" {
				t.Fatalf("GET %d: %d %s", i, a.Status, a.Body)
			}
		}
		if hits.Load() == 0 {
			t.Fatal("the broken instance was never tried: the test proves nothing")
		}
	})
	t.Run("POST is not retried once sent", func(t *testing.T) {
		var hits atomic.Int32
		bad := resetUpstream(t, &hits)
		_, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour}, []string{bad}, nil)
		a := do(t, "POST", gwURL+"/api/tasks/r1/cancel", `{}`, tok...)
		if a.Status != 503 {
			t.Fatalf("%d %s, want the fallback 503", a.Status, a.Body)
		}
		if n := hits.Load(); n != 1 {
			t.Fatalf("the POST reached the upstream %d times, want once", n)
		}
	})
	t.Run("any request goes elsewhere when the connection is refused", func(t *testing.T) {
		dead := fmt.Sprintf("http://127.0.0.1:%d", rig.FreePort(t))
		good := okUpstream(t, "good")
		_, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour}, []string{dead, good}, nil)
		for i := 0; i < 6; i++ {
			if a := do(t, "POST", gwURL+"/api/tasks/r1/cancel", `{}`, tok...); a.Status != 200 {
				t.Fatalf("POST %d: %d %s", i, a.Status, a.Body)
			}
		}
	})
}

// hangUpstream accepts connections and never answers.
func hangUpstream(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return "http://" + ln.Addr().String()
}

func TestFallback(t *testing.T) {
	tok := bearer(testToken(t, 1, "alice", "USER"))
	const timeout = 400 * time.Millisecond
	check := func(t *testing.T, cfg gateway.Config, up string, wantStatus int, wantCode string, slow bool) {
		t.Helper()
		cfg.UpstreamTimeout, cfg.HealthInterval = timeout, time.Hour
		_, gwURL := startGW(t, cfg, []string{up}, nil)
		start := time.Now()
		a := do(t, "GET", gwURL+"/api/tasks", "", append(tok, "X-Trace-Id", "fallback-trace")...)
		d := time.Since(start)
		if a.Status != wantStatus {
			t.Fatalf("%d %s, want %d", a.Status, a.Body, wantStatus)
		}
		if slow && (d < timeout || d > timeout+time.Second) {
			t.Fatalf("answered after %v, want just after FALLBACK_TIMEOUT (%v)", d, timeout)
		}
		if !slow && d > timeout {
			t.Fatalf("answered after %v: a refused connection should fail fast", d)
		}
		var v struct {
			Status, Message, TraceID string
			Error                    struct{ Code, Message, TraceID string }
		}
		a.JSON(t, &v)
		if v.Error.Code != wantCode || v.Error.TraceID != "fallback-trace" || a.Header.Get("X-Trace-Id") != "fallback-trace" {
			t.Fatalf("body %s, headers %v", a.Body, a.Header)
		}
		if wantStatus == 503 && (v.Status != "SERVICE_UNAVAILABLE" || v.Message != "Upstream service unavailable" || v.TraceID != "fallback-trace") {
			t.Fatalf("fallback body %s", a.Body)
		}
	}
	dead := func(t *testing.T) string { return fmt.Sprintf("http://127.0.0.1:%d", rig.FreePort(t)) }
	t.Run("hang", func(t *testing.T) { check(t, gateway.Config{}, hangUpstream(t), 503, "unavailable", true) })
	t.Run("down", func(t *testing.T) { check(t, gateway.Config{}, dead(t), 503, "unavailable", false) })
	t.Run("hang without fallback", func(t *testing.T) {
		check(t, gateway.Config{FallbackDisabled: true}, hangUpstream(t), 504, "gateway_timeout", true)
	})
	t.Run("down without fallback", func(t *testing.T) {
		check(t, gateway.Config{FallbackDisabled: true}, dead(t), 502, "bad_gateway", false)
	})
	t.Run("no instance at all", func(t *testing.T) {
		_, gwURL := startGW(t, gateway.Config{}, nil, nil)
		if a := do(t, "GET", gwURL+"/api/tasks", "", tok...); a.Status != 503 {
			t.Fatalf("%d %s", a.Status, a.Body)
		}
	})
}

// recordUpstream answers 200 and hands over each request's headers.
func recordUpstream(t testing.TB) (string, chan http.Header) {
	ch := make(chan http.Header, 64)
	url := upstream(t, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/api/monitor/health" && string(ctx.Request.Header.Peek("X-Trace-Id")) == "gateway-health-check" {
			return
		}
		h := http.Header{}
		for k, v := range ctx.Request.Header.All() {
			h.Add(string(k), string(v))
		}
		h.Set(":method", string(ctx.Method()))
		h.Set(":path", string(ctx.Request.Header.RequestURI()))
		// Whether the request verifies as a master would check it (a
		// master reads bodies whole; this upstream streams them).
		if bs := ctx.RequestBodyStream(); bs != nil {
			b, _ := io.ReadAll(bs)
			ctx.Request.SetBody(b)
		}
		f := signature.Of(&ctx.Request)
		h.Set(":signed", strconv.FormatBool(signature.NewSigner([]byte(testShared)).Valid(&f, string(ctx.Request.Header.Peek(signature.HeaderSignature)))))
		ch <- h
		ctx.SetBodyString("ok")
	})
	return url, ch
}

func TestIdentityHeadersStrippedAndSigned(t *testing.T) {
	up, seen := recordUpstream(t)
	_, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour}, []string{up}, nil)
	forged := []string{"X-User-Id", "1", "X-User-Role", "ADMIN", "x-user-name", "root", "X-User-Extra", "x",
		"X-Gateway-Signature", strings.Repeat("a", 64), "X-Gateway-Timestamp", "1"}

	// Anonymous, public path: none of it arrives; the gateway signs the
	// request without an identity.
	if a := do(t, "POST", gwURL+"/api/auth/login", `{}`, forged...); a.Status != 200 {
		t.Fatalf("%d %s", a.Status, a.Body)
	}
	h := <-seen
	for k := range h {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-user-") {
			t.Errorf("a client-sent %s reached the upstream: %q", k, h.Get(k))
		}
	}
	if h.Get(":signed") != "true" || h.Get("X-Gateway-Signature") == forged[9] || h.Get("X-Gateway-Timestamp") == "1" {
		t.Errorf("the anonymous request is not the gateway's own signed one: %v", h)
	}

	// Verified: the gateway's own identity, signed over everything.
	tok := testToken(t, 42, "alice", "USER")
	if a := do(t, "GET", gwURL+"/api/tasks?limit=5", "", append(append(bearer(tok), forged...), "X-Trace-Id", "tr-1")...); a.Status != 200 {
		t.Fatalf("%d %s", a.Status, a.Body)
	}
	h = <-seen
	if h.Get("X-User-Id") != "42" || h.Get("X-User-Name") != "alice" || h.Get("X-User-Role") != "USER" ||
		h.Get("X-User-Token-Version") != "0" || h.Get("X-User-Extra") != "" {
		t.Fatalf("identity headers %v", h)
	}
	empty := sha256.Sum256(nil)
	f := signature.Fields{Method: "GET", Host: strings.TrimPrefix(gwURL, "http://"), Path: "/api/tasks", Query: "limit=5",
		BodySHA256: hex.EncodeToString(empty[:]), TraceID: "tr-1", Timestamp: h.Get("X-Gateway-Timestamp"),
		Nonce: h.Get("X-Gateway-Nonce"), ClientIP: "127.0.0.1", UserID: "42", UserName: "alice", UserRole: "USER", Version: "0"}
	signer := signature.NewSigner([]byte(testShared))
	if !signer.Valid(&f, h.Get("X-Gateway-Signature")) || h.Get(":signed") != "true" {
		t.Fatalf("the signature does not verify: %v", h)
	}
	if !signature.Fresh(f.Timestamp, time.Now(), 5*time.Second) {
		t.Fatalf("timestamp %q is not now", f.Timestamp)
	}
	if h.Get(":path") != "/api/tasks?limit=5" || h.Get("X-Trace-Id") != "tr-1" {
		t.Fatalf("request line or trace changed: %v", h)
	}
	for name, edit := range map[string]func(f *signature.Fields){
		"role":  func(f *signature.Fields) { f.UserRole = "ADMIN" },
		"query": func(f *signature.Fields) { f.Query = "limit=500" },
		"nonce": func(f *signature.Fields) { f.Nonce = "another" },
		"host":  func(f *signature.Fields) { f.Host = "evil.example" },
	} {
		g := f
		edit(&g)
		if signer.Valid(&g, h.Get("X-Gateway-Signature")) {
			t.Errorf("the signature does not cover the %s", name)
		}
	}
	// Nonces differ from request to request.
	if a := do(t, "GET", gwURL+"/api/tasks?limit=5", "", append(bearer(tok), "X-Trace-Id", "tr-1")...); a.Status != 200 {
		t.Fatalf("%d %s", a.Status, a.Body)
	}
	if h2 := <-seen; h2.Get("X-Gateway-Nonce") == f.Nonce || h2.Get(":signed") != "true" {
		t.Fatalf("a second request reused nonce %q", f.Nonce)
	}
}

func TestAuthFilter(t *testing.T) {
	up, seen := recordUpstream(t)
	_, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour}, []string{up}, nil)
	valid := testToken(t, 7, "bob", "USER")
	parts := strings.Split(valid, ".")
	tampered := func() string {
		// Same signature, payload claiming another user.
		p := strings.NewReplacer(`"sub":"7"`, `"sub":"1"`).Replace(decodeSeg(t, parts[1]))
		return parts[0] + "." + encodeSeg(p) + "." + parts[2]
	}()
	none := encodeSeg(`{"alg":"none","typ":"JWT"}`) + "." + parts[1] + "."
	rs := encodeSeg(`{"alg":"RS256","typ":"JWT"}`) + "." + parts[1] + "." + parts[2]
	expired := mint(t, testJWT, 7, "bob", "USER", time.Now().Add(-time.Minute))
	wrongKey := mint(t, "another-secret-0123456789", 7, "bob", "USER", time.Now().Add(time.Hour))
	noExp := func() string {
		s, _ := jwtNoExp(testJWT)
		return s
	}()
	for name, tok := range map[string]string{"none": none, "RS256 header": rs, "expired": expired,
		"wrong key": wrongKey, "tampered": tampered, "no expiry": noExp, "garbage": "abc.def.ghi"} {
		a := do(t, "GET", gwURL+"/api/tasks", "", bearer(tok)...)
		if a.Status != 401 || !strings.Contains(string(a.Body), `"code":"unauthorized"`) || a.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s token: %d %s", name, a.Status, a.Body)
		}
	}
	if a := do(t, "GET", gwURL+"/api/tasks", ""); a.Status != 401 {
		t.Errorf("no token: %d", a.Status)
	}
	// Browsers are sent to the login page, which returns them to the
	// dashboard page they asked for, an unknown one too (the dashboard
	// says it is not found), never to an API path, a session's app or
	// another site; the login page and static files are public.
	for p, want := range map[string]string{"/runs": "/login?next=%2Fruns", "/no-such-page?x=1": "/login?next=%2Fno-such-page%3Fx%3D1",
		"/": "/login", "/api/tasks": "/login", "/sessions/abc/": "/login", "//evil.example/x": "/login", "/a%5C%5Cevil.example": "/login"} {
		a := do(t, "GET", gwURL+p, "", "Accept", "text/html,application/xhtml+xml")
		if a.Status != 302 || a.Header.Get("Location") != want {
			t.Errorf("HTML GET of %s without a token: %d %v, want a redirect to %s", p, a.Status, a.Header, want)
		}
	}
	for _, p := range []string{"/login", "/static/app.js", "/api/monitor/health", "/gateway-actuator/health"} {
		if a := do(t, "GET", gwURL+p, "", "Accept", "text/html"); a.Status != 200 {
			t.Errorf("public %s: %d %s", p, a.Status, a.Body)
		}
	}
	// Valid: header, cookie; ?token= only on /ws.
	if a := do(t, "GET", gwURL+"/api/tasks", "", bearer(valid)...); a.Status != 200 {
		t.Errorf("valid token: %d %s", a.Status, a.Body)
	}
	if a := do(t, "GET", gwURL+"/runs", "", "Cookie", "jwt_token="+valid, "Accept", "text/html"); a.Status != 200 {
		t.Errorf("valid cookie: %d %s", a.Status, a.Body)
	}
	if a := do(t, "GET", gwURL+"/api/tasks?token="+valid, ""); a.Status != 401 {
		t.Errorf("?token= outside /ws: %d", a.Status)
	}
	// A malformed Authorization is no token, even with a good cookie.
	if a := do(t, "GET", gwURL+"/api/tasks", "", "Authorization", "Basic eDp5", "Cookie", "jwt_token="+valid); a.Status != 401 {
		t.Errorf("malformed Authorization: %d", a.Status)
	}
	// Escapes are judged as the master routes them.
	if a := do(t, "POST", gwURL+"/api/auth/%6Cogin", `{}`); a.Status != 200 {
		t.Errorf("escaped public path: %d", a.Status)
	}
	for len(seen) > 0 {
		<-seen
	}
}

func TestRateLimitLocal(t *testing.T) {
	up := okUpstream(t, "m")
	_, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour, AllowAnonymous: true, RateLimitWindow: 2 * time.Second}, []string{up}, nil)
	alice, bob := bearer(testToken(t, 1, "alice", "USER")), bearer(testToken(t, 2, "bob", "USER"))
	for i := 1; i <= 3; i++ {
		a := do(t, "POST", gwURL+"/api/train", `{}`, alice...)
		if a.Status != 200 || a.Header.Get("X-RateLimit-Limit") != "3" || a.Header.Get("X-RateLimit-Remaining") != fmt.Sprint(3-i) {
			t.Fatalf("submission %d: %d %v", i, a.Status, a.Header)
		}
	}
	a := do(t, "POST", gwURL+"/api/train", `{}`, alice...)
	if a.Status != 429 || a.Header.Get("X-RateLimit-Limit") != "3" || a.Header.Get("X-RateLimit-Remaining") != "0" ||
		a.Header.Get("Retry-After") == "" || !strings.Contains(string(a.Body), `"code":"rate_limited"`) {
		t.Fatalf("4th submission: %d %v %s", a.Status, a.Header, a.Body)
	}
	// Per user: bob is not alice; per IP for the anonymous; the escaped path
	// is the same route; other methods and paths are not limited.
	if a := do(t, "POST", gwURL+"/api/train", `{}`, bob...); a.Status != 200 {
		t.Fatalf("bob: %d", a.Status)
	}
	for i := 0; i < 3; i++ {
		if a := do(t, "POST", gwURL+"/api/train", `{}`); a.Status != 200 {
			t.Fatalf("anonymous %d: %d", i, a.Status)
		}
	}
	if a := do(t, "POST", gwURL+"/api/%74rain", `{}`); a.Status != 429 {
		t.Fatalf("anonymous 4th, escaped: %d", a.Status)
	}
	if a := do(t, "GET", gwURL+"/api/tasks", "", alice...); a.Status != 200 {
		t.Fatalf("GET while limited: %d", a.Status)
	}
	// A rerun is a submission: it counts against the same budget.
	if a := do(t, "POST", gwURL+"/api/tasks/r1/rerun", `{}`, alice...); a.Status != 429 {
		t.Fatalf("a rerun while limited: %d", a.Status)
	}
	carol := bearer(testToken(t, 3, "carol", "USER"))
	for i := 1; i <= 3; i++ {
		if a := do(t, "POST", gwURL+"/api/tasks/r1/rerun", "", carol...); a.Status != 200 || a.Header.Get("X-RateLimit-Remaining") != fmt.Sprint(3-i) {
			t.Fatalf("carol's rerun %d: %d %v", i, a.Status, a.Header)
		}
	}
	if a := do(t, "POST", gwURL+"/api/train", `{}`, carol...); a.Status != 429 {
		t.Fatalf("carol's submission after three reruns: %d", a.Status)
	}
	// The window slides: after it, alice may submit again.
	testutil.Eventually(t, 5*time.Second, func() (bool, string) {
		a := do(t, "POST", gwURL+"/api/train", `{}`, alice...)
		return a.Status == 200, fmt.Sprintf("still %d", a.Status)
	})
}

// bucket is the gateway's canary hash, recomputed here: FNV-1a mod 100.
func bucket(key string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h % 100
}

func TestCanaryChoice(t *testing.T) {
	stable, canary := okUpstream(t, "stable"), okUpstream(t, "canary")
	_, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour, CanaryUserIDs: []string{"2"}, CanaryPercent: 30},
		[]string{stable}, []string{canary})
	route := func(a answer) string {
		t.Helper()
		if a.Status != 200 {
			t.Fatalf("%d %s", a.Status, a.Body)
		}
		c, svc := a.Header.Get("X-Canary"), a.Header.Get("X-Upstream-Service")
		if (string(a.Body) == "canary") != (c == "true") || (c == "true") != (svc == discovery.ServiceCanary) {
			t.Fatalf("body %s, X-Canary %s, X-Upstream-Service %s", a.Body, c, svc)
		}
		return string(a.Body)
	}
	// A user below the percentage and one above.
	var lowID, highID int64
	for id := int64(3); lowID == 0 || highID == 0; id++ {
		if bucket(fmt.Sprint(id)) < 30 {
			lowID = id
		} else {
			highID = id
		}
	}
	high := bearer(testToken(t, highID, "high", "USER"))
	if got := route(do(t, "GET", gwURL+"/api/tasks", "", high...)); got != "stable" {
		t.Fatalf("user %d above the percentage went to %s", highID, got)
	}
	if got := route(do(t, "GET", gwURL+"/api/tasks", "", append(high, "X-Canary", "true")...)); got != "canary" {
		t.Fatalf("X-Canary: true went to %s", got)
	}
	if got := route(do(t, "GET", gwURL+"/api/tasks", "", bearer(testToken(t, 2, "listed", "USER"))...)); got != "canary" {
		t.Fatalf("a whitelisted user went to %s", got)
	}
	if got := route(do(t, "GET", gwURL+"/api/tasks", "", append(high, "X-User-Id", "2")...)); got != "stable" {
		t.Fatalf("a client-sent X-User-Id of a whitelisted user went to %s", got)
	}
	for i := 0; i < 5; i++ { // stable per user, whatever the trace id
		if got := route(do(t, "GET", gwURL+"/api/tasks", "", bearer(testToken(t, lowID, "low", "USER"))...)); got != "canary" {
			t.Fatalf("user %d below the percentage went to %s", lowID, got)
		}
	}
	// Anonymous requests split by trace id.
	n := map[string]int{}
	for i := 0; i < 100; i++ {
		trace := fmt.Sprintf("trace-%d", i)
		want := "stable"
		if bucket(trace) < 30 {
			want = "canary"
		}
		if got := route(do(t, "GET", gwURL+"/api/monitor/health", "", "X-Trace-Id", trace)); got != want {
			t.Fatalf("trace %s went to %s, want %s", trace, got, want)
		}
		n[want]++
	}
	if n["canary"] < 15 || n["canary"] > 45 {
		t.Fatalf("split %v: not near 30%%", n)
	}
}

func TestCanaryFallsBackToStable(t *testing.T) {
	stable := okUpstream(t, "stable")
	_, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour}, []string{stable}, nil)
	a := do(t, "GET", gwURL+"/api/monitor/health", "", "X-Canary", "true")
	if a.Status != 200 || string(a.Body) != "stable" || a.Header.Get("X-Canary") != "false" || a.Header.Get("X-Upstream-Service") != discovery.ServiceStable {
		t.Fatalf("%d %s %v", a.Status, a.Body, a.Header)
	}
}

func TestActuatorAndMetrics(t *testing.T) {
	stable, canary := adminUpstream(t, "stable", "ADMIN"), okUpstream(t, "canary")
	_, gwURL := startGW(t, gateway.Config{HealthInterval: 100 * time.Millisecond}, []string{stable}, []string{canary})
	a := do(t, "GET", gwURL+"/gateway-actuator/health", "")
	var h struct {
		Status   string
		Services map[string]struct{ Available, Total int }
	}
	a.JSON(t, &h)
	if a.Status != 200 || h.Status != "UP" || h.Services[discovery.ServiceStable].Total != 1 || h.Services[discovery.ServiceCanary].Total != 1 {
		t.Fatalf("%d %s", a.Status, a.Body)
	}
	if a := do(t, "GET", gwURL+"/gateway-actuator/gateway/routes", ""); a.Status != 401 {
		t.Fatalf("routes without a token: %d", a.Status)
	}
	if a := do(t, "GET", gwURL+"/gateway-actuator/gateway/routes", "", bearer(testToken(t, 2, "bob", "USER"))...); a.Status != 403 {
		t.Fatalf("routes for a user: %d", a.Status)
	}
	r := routes(t, gwURL, testToken(t, 1, "root", "ADMIN"))
	in, ok := instance(r, canary)
	if !ok || !in.Canary || in.Service != discovery.ServiceCanary || !in.Available {
		t.Fatalf("routes %+v", r)
	}
	testutil.Eventually(t, 5*time.Second, func() (bool, string) {
		in, _ := instance(routes(t, gwURL, testToken(t, 1, "root", "ADMIN")), stable)
		return in.LastCheck != nil, "no health check yet"
	})
	// A token that says ADMIN for a user the master says is not one now.
	_, demoted := startGW(t, gateway.Config{HealthInterval: time.Hour}, []string{adminUpstream(t, "stable", "USER")}, nil)
	if a := do(t, "GET", demoted+"/gateway-actuator/gateway/routes", "", bearer(testToken(t, 1, "root", "ADMIN"))...); a.Status != 403 {
		t.Fatalf("routes for a token the master no longer backs: %d", a.Status)
	}
	a = do(t, "GET", gwURL+"/metrics", "")
	for _, want := range []string{"rlsched_gateway_requests_total", "rlsched_gateway_upstream_available", "go_goroutines"} {
		if a.Status != 200 || !bytes.Contains(a.Body, []byte(want)) {
			t.Fatalf("/metrics lacks %s: %d\n%.2000s", want, a.Status, a.Body)
		}
	}
}

func TestOutlierEjection(t *testing.T) {
	var hits atomic.Int32
	bad := resetUpstream(t, &hits)
	good := okUpstream(t, "good")
	g, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour, EjectAfter: 2, EjectFor: time.Hour}, []string{bad, good}, nil)
	tok := bearer(testToken(t, 1, "alice", "USER"))
	for i := 0; i < 10; i++ {
		if a := do(t, "GET", gwURL+"/api/tasks", "", tok...); a.Status != 200 {
			t.Fatalf("GET %d: %d", i, a.Status)
		}
	}
	if n := hits.Load(); n != 2 {
		t.Fatalf("the failing instance got %d requests, want 2 before its ejection", n)
	}
	in, _ := instance(g.Routes(), bad)
	if !in.Ejected || in.Available {
		t.Fatalf("%+v", in)
	}
}

// jwtNoExp signs a token without an expiry.
func jwtNoExp(secret string) (string, error) {
	return mintClaims(secret, map[string]any{"sub": "7", "name": "bob", "role": "USER"})
}

func mintClaims(secret string, claims map[string]any) (string, error) {
	h := encodeSeg(`{"alg":"HS256","typ":"JWT"}`)
	b, _ := json.Marshal(claims)
	p := encodeSeg(string(b))
	return h + "." + p + "." + hs256(secret, h+"."+p), nil
}

// TestRateLimitCountsSweepMembers (issue 25): a sweep is admitted as one
// submission, then its members beyond the first count against the limit
// as the master reports them, so a sweep cannot make a thousand runs past
// a limit of three.
func TestRateLimitCountsSweepMembers(t *testing.T) {
	up := upstream(t, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/api/sweeps" {
			ctx.Response.Header.Set(signature.HeaderRunsQueued, "5")
		}
		ctx.SetStatusCode(fasthttp.StatusAccepted)
	})
	_, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour, AllowAnonymous: true, RateLimitWindow: time.Hour}, []string{up}, nil)
	alice, bob := bearer(testToken(t, 1, "alice", "USER")), bearer(testToken(t, 2, "bob", "USER"))
	if a := do(t, "POST", gwURL+"/api/sweeps", `{}`, alice...); a.Status != 202 {
		t.Fatalf("the sweep: %d", a.Status)
	}
	if a := do(t, "POST", gwURL+"/api/train", `{}`, alice...); a.Status != 429 {
		t.Fatalf("a submission after a sweep of 5 under a limit of 3: %d, want 429", a.Status)
	}
	// One run at a time still gets its three.
	for i := range 3 {
		if a := do(t, "POST", gwURL+"/api/train", `{}`, bob...); a.Status != 202 {
			t.Fatalf("bob's submission %d: %d", i+1, a.Status)
		}
	}
}
