package e2e

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/clip"
	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// makeJWT signs claims with HS256 (or writes alg "none" when secret is nil).
func makeJWT(alg string, secret []byte, claims map[string]any) string {
	enc := base64.RawURLEncoding
	h, _ := json.Marshal(map[string]string{"alg": alg, "typ": "JWT"})
	c, _ := json.Marshal(claims)
	msg := enc.EncodeToString(h) + "." + enc.EncodeToString(c)
	if secret == nil {
		return msg + "."
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(msg))
	return msg + "." + enc.EncodeToString(mac.Sum(nil))
}

// rawHTTP sends req as bytes on a new connection and reads one response.
// extra, when not nil, is written after req by a goroutine (a body the
// server may refuse to read).
func rawHTTP(t *testing.T, addr string, req string, extra func(io.Writer)) response {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	if extra != nil {
		go extra(c) // write errors are expected once the server has answered
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no HTTP answer to %q: %v", clip.String(req, 80), err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: body}
}

// TestRESTBadInput: malformed, mistyped, oversized and hostile requests to
// a real master each get a 4xx in API.md's error shape, never a 500, and the
// master stays up.
func TestRESTBadInput(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: b.Dir + "/data"})
	anon := newClient(t, m.URL)
	alice, admin := signup(t, m.URL, "alice", "ADMIN")
	addr := strings.TrimPrefix(m.URL, "http://")

	long := strings.Repeat("a", 1000)
	unknown := "r0000000000000000000000"
	type tc struct {
		method, path string
		body         any
		status       int
		code         string
	}
	cases := []tc{
		// Bodies of POST /api/train.
		{"POST", "/api/train", `{"algorithm":`, 400, "bad_request"},
		{"POST", "/api/train", `{"algorithm":"PPO"}}`, 400, "bad_request"},
		{"POST", "/api/train", ``, 400, "bad_request"},
		{"POST", "/api/train", `null`, 400, "bad_request"},
		{"POST", "/api/train", `[1,2,3]`, 400, "bad_request"},
		{"POST", "/api/train", `"PPO"`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":"sleep 1"}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":[1,2]}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":[]}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":[""]}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["a\u0000b"]}`, 400, "bad_request"},
		{"POST", "/api/train", `{"algorithm":"PPO","episodes":"200"}`, 400, "bad_request"},
		{"POST", "/api/train", `{"algorithm":"PPO","episodes":0}`, 400, "bad_request"},
		{"POST", "/api/train", `{"algorithm":"PPO","episodes":-5}`, 400, "bad_request"},
		{"POST", "/api/train", `{"algorithm":"PPO","episodes":1e300}`, 400, "bad_request"},
		{"POST", "/api/train", `{"algorithm":"PPO","episodes":2.5}`, 400, "bad_request"},
		{"POST", "/api/train", `{"algorithm":"PPO","learningRate":"fast"}`, 400, "bad_request"},
		{"POST", "/api/train", `{"algorithm":"../../bin/sh"}`, 400, "bad_request"},
		{"POST", "/api/train", `{"algorithm":"PPO","command":["true"]}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"gpus":-1}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"gpus":99999999999999999999}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"priority":true}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"maxRetries":-1}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"timeoutSeconds":-1}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"env":["A=1"]}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"env":{"A":1}}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"env":{"RLSCHED_TASK_ID":"x"}}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"env":{"CUDA_VISIBLE_DEVICES":"0"}}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"env":{"A=B":"1"}}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"params":[1]}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"params":{"--rm":"x"}}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"tags":"x"}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"tags":[""]}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"name":"` + strings.Repeat("n", 300) + `"}`, 400, "bad_request"},
		{"POST", "/api/train", `{"command":["true"],"workdir":"a\u0000b"}`, 400, "bad_request"},
		// Auth bodies.
		{"POST", "/api/auth/register", `{"username":"al","password":"a-long-password"}`, 400, "bad_request"},
		{"POST", "/api/auth/register", `{"username":"../etc","password":"a-long-password"}`, 400, "bad_request"},
		{"POST", "/api/auth/register", `{"username":"carol","password":"short"}`, 400, "bad_request"},
		{"POST", "/api/auth/register", `{"username":123,"password":"a-long-password"}`, 400, "bad_request"},
		{"POST", "/api/auth/register", `{"username":"carol","password":"` + strings.Repeat("p", 100) + `"}`, 400, "bad_request"},
		{"POST", "/api/auth/register", `{"username":"alice","password":"a-long-password"}`, 409, "conflict"},
		{"POST", "/api/auth/register", `{`, 400, "bad_request"},
		{"POST", "/api/auth/login", `{"username":"alice","password":"wrong-password"}`, 401, "unauthorized"},
		{"POST", "/api/auth/login", `{"username":"nobody","password":"a-long-password"}`, 401, "unauthorized"},
		{"POST", "/api/auth/login", `{"username":["alice"]}`, 400, "bad_request"},
		// Ids in paths never reach the filesystem.
		{"GET", "/api/tasks/..%2F..%2Fetc%2Fpasswd", nil, 400, "bad_request"},
		{"GET", "/api/monitor/logs/..%2F..%2Fetc%2Fpasswd", nil, 400, "bad_request"},
		{"GET", "/api/monitor/logs/../../etc/passwd", nil, 400, "bad_request"},
		{"GET", "/api/monitor/logs/..%252F..%252Fetc%252Fpasswd", nil, 400, "bad_request"},
		{"GET", "/api/monitor/logs/%2Fetc%2Fpasswd", nil, 400, "bad_request"},
		{"GET", "/api/tasks/..%2F..%2Fetc%2Fpasswd/metrics", nil, 400, "bad_request"},
		{"POST", "/api/tasks/..%2F..%2Fetc%2Fpasswd/cancel", nil, 400, "bad_request"},
		{"POST", "/api/tasks/..%2F..%2Fetc%2Fpasswd/rerun", nil, 400, "bad_request"},
		{"GET", "/api/tasks/" + long, nil, 400, "bad_request"},
		{"GET", "/api/monitor/logs/" + long, nil, 400, "bad_request"},
		{"POST", "/api/tasks/" + long + "/cancel", nil, 400, "bad_request"},
		{"GET", "/api/tasks/abc%00def", nil, 400, "bad_request"},
		{"GET", "/api/monitor/logs/abc%00def", nil, 400, "bad_request"},
		{"GET", "/api/monitor/logs/abc%00.log", nil, 400, "bad_request"},
		{"GET", "/api/tasks/abc%20def", nil, 400, "bad_request"},
		{"GET", "/api/tasks/%E2%80%AE", nil, 400, "bad_request"},
		// Unknown but well-formed ids.
		{"GET", "/api/tasks/" + unknown, nil, 404, "not_found"},
		{"GET", "/api/monitor/logs/" + unknown, nil, 404, "not_found"},
		{"GET", "/api/tasks/" + unknown + "/metrics", nil, 404, "not_found"},
		{"GET", "/api/tasks/" + unknown + "/artifacts", nil, 404, "not_found"},
		{"POST", "/api/tasks/" + unknown + "/cancel", nil, 404, "not_found"},
		{"POST", "/api/tasks/" + unknown + "/rerun", nil, 404, "not_found"},
		// Query parameters.
		{"GET", "/api/tasks?limit=abc", nil, 400, "bad_request"},
		{"GET", "/api/tasks?limit=-1", nil, 400, "bad_request"},
		{"GET", "/api/tasks?status=BOGUS", nil, 400, "bad_request"},
		{"GET", "/api/tasks?cursor=%00garbage", nil, 400, "bad_request"},
		{"GET", "/api/tasks?cursor=" + strings.Repeat("x", 2000), nil, 400, "bad_request"},
		{"GET", "/api/monitor/logs/" + unknown + "?offset=-5", nil, 400, "bad_request"},
		{"GET", "/api/monitor/logs/" + unknown + "?offset=abc", nil, 400, "bad_request"},
		{"GET", "/api/monitor/logs/" + unknown + "?limit=0", nil, 400, "bad_request"},
		{"GET", "/api/tasks/" + unknown + "/metrics?names=" + strings.Repeat("m", 200), nil, 400, "bad_request"},
		// Wrong paths and methods.
		{"GET", "/api/nonexistent", nil, 404, "not_found"},
		{"GET", "/api/tasks/" + unknown + "/bogus", nil, 404, "not_found"},
		{"DELETE", "/api/train", nil, 405, ""},
		{"GET", "/api/train", nil, 405, ""},
		{"PUT", "/api/tasks/" + unknown, `{}`, 405, ""},
	}
	for _, c := range cases {
		r, err := alice.Do(c.method, c.path, c.body)
		if err != nil {
			t.Errorf("%s %s: %v", c.method, clip.String(c.path, 60), err)
			continue
		}
		checkError(t, fmt.Sprintf("%s %s %v", c.method, clip.String(c.path, 60), clip.String(fmt.Sprint(c.body), 60)), r, c.status, c.code)
	}

	// Tokens: missing, malformed, expired, tampered, unsigned, foreign.
	now := time.Now()
	claims := func(sub string, exp time.Time) map[string]any {
		return map[string]any{"sub": sub, "name": "alice", "role": "ADMIN", "iat": now.Unix(), "exp": exp.Unix()}
	}
	sub := strconv.FormatInt(admin.ID, 10)
	secret := []byte(b.JWTSecret)
	good := makeJWT("HS256", secret, claims(sub, now.Add(time.Hour)))
	alice.as(good).Must("GET", "/api/auth/me", nil, 200, nil) // the forged-by-us control token is well formed
	tampered := []byte(alice.Token)
	tampered[len(tampered)-3] ^= 0x01
	i := strings.IndexByte(alice.Token, '.')
	j := strings.LastIndexByte(alice.Token, '.')
	elevated := alice.Token[:i+1] + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"1","name":"alice","role":"ADMIN","exp":99999999999}`)) + alice.Token[j:]
	tokens := map[string]string{
		"expired":         makeJWT("HS256", secret, claims(sub, now.Add(-time.Minute))),
		"tampered":        string(tampered),
		"payload swapped": elevated,
		"alg none":        makeJWT("none", nil, claims(sub, now.Add(time.Hour))),
		"alg HS512":       makeJWT("HS512", secret, claims(sub, now.Add(time.Hour))),
		"other secret":    makeJWT("HS256", []byte("some-other-secret-0123456789"), claims(sub, now.Add(time.Hour))),
		"no exp":          makeJWT("HS256", secret, map[string]any{"sub": sub}),
		"unknown user":    makeJWT("HS256", secret, claims("999999", now.Add(time.Hour))),
		"bad sub":         makeJWT("HS256", secret, claims("../1", now.Add(time.Hour))),
		"garbage":         "garbage",
		"empty parts":     "..",
		"long":            strings.Repeat("A", 3000),
	}
	for name, tok := range tokens {
		for _, path := range []string{"/api/auth/me", "/api/tasks", "/api/monitor/logs/" + unknown} {
			r, err := anon.as(tok).Do("GET", path, nil)
			if err != nil {
				t.Errorf("token %s: %v", name, err)
				continue
			}
			checkError(t, "token "+name+" on "+path, r, 401, "unauthorized")
		}
	}
	for name, hdr := range map[string][]string{
		"no token":        nil,
		"basic auth":      {"Authorization", "Basic YWxpY2U6YS1sb25nLXBhc3N3b3Jk"},
		"empty bearer":    {"Authorization", "Bearer "},
		"bearer only":     {"Authorization", "Bearer"},
		"tampered cookie": {"Cookie", "jwt_token=" + string(tampered)},
	} {
		r, err := anon.Do("POST", "/api/train", `{"command":["true"]}`, hdr...)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		checkError(t, name, r, 401, "unauthorized")
	}

	// Trace ids: a valid one is echoed in the header and the error body, an
	// invalid one replaced by a fresh 32-hex id.
	r, err := alice.Do("GET", "/api/tasks/"+unknown, nil, "X-Trace-Id", "e2e-trace_1")
	if err != nil {
		t.Fatal(err)
	}
	checkError(t, "with X-Trace-Id", r, 404, "not_found")
	if h := r.Header.Get("X-Trace-Id"); h != "e2e-trace_1" {
		t.Errorf("X-Trace-Id e2e-trace_1 answered as %q", h)
	}
	r, err = alice.Do("GET", "/api/tasks/"+unknown, nil, "X-Trace-Id", "bad trace/../"+long)
	if err != nil {
		t.Fatal(err)
	}
	checkError(t, "with a bad X-Trace-Id", r, 404, "not_found")
	if h := r.Header.Get("X-Trace-Id"); !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(h) {
		t.Errorf("a bad X-Trace-Id was answered with %q; want a fresh 32-hex id", h)
	}

	// Bodies over 1 MiB: 413, by Content-Length and chunked.
	auth := "Authorization: Bearer " + alice.Token + "\r\n"
	r = rawHTTP(t, addr, "POST /api/train HTTP/1.1\r\nHost: e2e\r\n"+auth+
		"Content-Type: application/json\r\nContent-Length: 1048577\r\n\r\n", func(w io.Writer) {
		_, _ = w.Write([]byte(`{"name":"` + strings.Repeat("x", 1048577-11) + `"}`))
	})
	checkError(t, "Content-Length 1 MiB + 1", r, 413, "payload_too_large")
	r = rawHTTP(t, addr, "POST /api/train HTTP/1.1\r\nHost: e2e\r\n"+auth+
		"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", func(w io.Writer) {
		chunk := strings.Repeat("y", 64<<10)
		for k := 0; k < 40; k++ {
			if _, err := fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, "0\r\n\r\n")
	})
	checkError(t, "chunked 2.5 MiB", r, 413, "payload_too_large")
	r, err = alice.Do("POST", "/api/train", strings.Repeat(" ", 1<<20+100))
	if err == nil { // the server may close before the client finishes sending
		checkError(t, "1 MiB of spaces", r, 413, "payload_too_large")
	}
	// Malformed HTTP and escapes net/http will not send.
	for _, path := range []string{"/api/tasks/%zz", "/api/monitor/logs/%", "/api/monitor/logs/a%2", "/api/tasks/%00/cancel"} {
		r = rawHTTP(t, addr, "GET "+path+" HTTP/1.1\r\nHost: e2e\r\n"+auth+"\r\n", nil)
		checkError(t, "raw GET "+path, r, 0, "")
	}
	r = rawHTTP(t, addr, "HELLO\r\n\r\n", nil)
	if r.Status < 400 || r.Status >= 500 {
		t.Errorf("a malformed request line: %s; want a 4xx", r)
	}
	r = rawHTTP(t, addr, "GET /api/monitor/health HTTP/1.1\r\nHost: e2e\r\nX-Big: "+strings.Repeat("h", 64<<10)+"\r\n\r\n", nil)
	checkError(t, "a 64 KiB header", r, 0, "")
	r = rawHTTP(t, addr, "GET /api/auth/me HTTP/1.1\r\nHost: e2e\r\nAuthorization: Bearer "+strings.Repeat("A", 9000)+"\r\n\r\n", nil)
	checkError(t, "a 9000-byte token", r, 0, "")

	// The master is still up and healthy, and logged no BUG (checked at cleanup).
	if m.Exited() {
		t.Fatalf("the master exited: %v\n%s", m.Err(), rig.Tail(m.Stderr(), 40))
	}
	var health struct {
		Status string `json:"status"`
	}
	anon.Must("GET", "/api/monitor/health", nil, 200, &health)
	if health.Status != "UP" {
		t.Errorf("health %q after bad input, want UP", health.Status)
	}
	var list struct {
		Items []task `json:"items"`
	}
	alice.Must("GET", "/api/tasks", nil, 200, &list)
	if len(list.Items) != 0 {
		t.Errorf("bad input created runs: %+v", list.Items)
	}
}
