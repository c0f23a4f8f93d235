package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/gateway"
	"github.com/rlsched/rlsched/gateway/discovery"
	"github.com/rlsched/rlsched/internal/signature"
	"github.com/rlsched/rlsched/internal/testkit/testsvc"
)

// healthMaster reads which master answered /api/monitor/health.
func healthMaster(t testing.TB, a answer) string {
	t.Helper()
	if a.status != 200 {
		t.Fatalf("health: %d %s", a.status, a.body)
	}
	var h struct{ Master string }
	a.json(t, &h)
	return h.Master
}

var hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestProcessTraceIDAuthAndRunLog(t *testing.T) {
	b := newBed(t)
	m := b.startMaster("m1", 0)
	b.startWorker("w1", m.rpc)
	alice := registerOn(t, []*master{m}, "alice")
	g := b.startGateway("gw", nil, "--masters", m.url)

	// Trace ids: made when absent or invalid, echoed when valid, and the
	// master sees the same one.
	a := do(t, "GET", g.url+"/api/monitor/health", "")
	if !hex32.MatchString(a.header.Get("X-Trace-Id")) || healthMaster(t, a) != "m1" {
		t.Fatalf("no trace id made: %v", a.header)
	}
	if a := do(t, "GET", g.url+"/api/monitor/health", "", "X-Trace-Id", "bad trace!"); !hex32.MatchString(a.header.Get("X-Trace-Id")) {
		t.Fatalf("an invalid trace id was kept: %v", a.header)
	}
	a = do(t, "GET", g.url+"/api/auth/me", "", append(bearer(alice.token), "X-Trace-Id", "gw-trace-me")...)
	if a.status != 200 || a.header.Get("X-Trace-Id") != "gw-trace-me" || !strings.Contains(string(a.body), `"username":"alice"`) {
		t.Fatalf("me: %d %v %s", a.status, a.header, a.body)
	}

	// The trace id of a submission is the first line of its log.
	a = do(t, "POST", g.url+"/api/train", `{"command":["/bin/echo","hello through the gateway"]}`,
		append(bearer(alice.token), "X-Trace-Id", "gw-trace-run-1")...)
	if a.status != 202 {
		t.Fatalf("submit: %d %s", a.status, a.body)
	}
	var sub struct{ ID, TraceID string }
	a.json(t, &sub)
	if sub.TraceID != "gw-trace-run-1" || a.header.Get("X-Trace-Id") != "gw-trace-run-1" {
		t.Fatalf("submit: %s %v", a.body, a.header)
	}
	eventually(t, 60*time.Second, func() (bool, string) {
		a := do(t, "GET", g.url+"/api/tasks/"+sub.ID, "", bearer(alice.token)...)
		var task struct{ Status string }
		a.json(t, &task)
		return task.Status == "SUCCEEDED", "run is " + task.Status
	})
	a = do(t, "GET", g.url+"/api/monitor/logs/"+sub.ID, "", bearer(alice.token)...)
	var logs struct{ Content []string }
	a.json(t, &logs)
	if len(logs.Content) < 2 || logs.Content[0] != "TRACE_ID:gw-trace-run-1" || !strings.Contains(strings.Join(logs.Content, "\n"), "hello through the gateway") {
		t.Fatalf("log through the gateway: %s", a.body)
	}
	f, err := os.Open(filepath.Join(m.dataDir, "logs", sub.ID+".log"))
	if err != nil {
		t.Fatal(err)
	}
	first, _ := bufio.NewReader(f).ReadString('\n')
	f.Close()
	if first != "TRACE_ID:gw-trace-run-1\n" {
		t.Fatalf("log file starts with %q", first)
	}

	// Authentication at the gateway.
	if a := do(t, "GET", g.url+"/api/tasks", ""); a.status != 401 {
		t.Fatalf("no token: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", g.url+"/runs", "", "Accept", "text/html"); a.status != 302 || a.header.Get("Location") != "/login" {
		t.Fatalf("HTML without a token: %d %v", a.status, a.header)
	}
	parts := strings.Split(alice.token, ".")
	for name, tok := range map[string]string{
		"alg none":  encodeSeg(`{"alg":"none","typ":"JWT"}`) + "." + parts[1] + ".",
		"expired":   mint(t, b.jwtSecret, alice.id, "alice", "ADMIN", time.Now().Add(-time.Minute)),
		"wrong key": mint(t, "not-the-secret-0123456789", alice.id, "alice", "ADMIN", time.Now().Add(time.Hour)),
		"tampered":  parts[0] + "." + encodeSeg(strings.Replace(decodeSeg(t, parts[1]), `"name":"alice"`, `"name":"mallory"`, 1)) + "." + parts[2],
	} {
		if a := do(t, "GET", g.url+"/api/tasks", "", bearer(tok)...); a.status != 401 {
			t.Errorf("%s token: %d %s", name, a.status, a.body)
		}
	}
	// A client claiming an identity gets nothing for it.
	if a := do(t, "GET", g.url+"/api/auth/me", "", "X-User-Id", "1", "X-User-Name", "alice", "X-User-Role", "ADMIN"); a.status != 401 {
		t.Fatalf("client-sent identity: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", g.url+"/gateway-actuator/health", ""); a.status != 200 {
		t.Fatalf("actuator health: %d %s", a.status, a.body)
	}
}

func TestProcessRateLimitSharedThroughRedis(t *testing.T) {
	addr := testsvc.RequireRedis(t)
	b := newBed(t)
	m := b.startMaster("m1", 0)
	alice := registerOn(t, []*master{m}, "alice")
	bob := registerOn(t, []*master{m}, "bob")
	prefix := "rlsched-gwtest-" + randHex(6)
	t.Cleanup(func() { deleteKeys(t, addr, prefix) })
	env := []string{"REDIS_ADDR=" + addr, "REDIS_PREFIX=" + prefix}
	g1 := b.startGateway("gw1", env, "--masters", m.url)
	g2 := b.startGateway("gw2", env, "--masters", m.url)
	for i, g := range []*gw{g1, g2, g1} {
		a := do(t, "POST", g.url+"/api/train", `{"command":["/bin/true"]}`, bearer(alice.token)...)
		if a.status != 202 || a.header.Get("X-RateLimit-Remaining") != fmt.Sprint(2-i) {
			t.Fatalf("submission %d: %d %v %s", i+1, a.status, a.header, a.body)
		}
	}
	a := do(t, "POST", g2.url+"/api/train", `{"command":["/bin/true"]}`, bearer(alice.token)...)
	if a.status != 429 || a.header.Get("X-RateLimit-Limit") != "3" || a.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("4th submission through the other gateway: %d %v %s", a.status, a.header, a.body)
	}
	if ra := a.header.Get("Retry-After"); ra == "" || ra == "0" || len(ra) > 2 {
		t.Fatalf("Retry-After %q", ra)
	}
	// Another user has a budget of their own.
	if a := do(t, "POST", g2.url+"/api/train", `{"command":["/bin/true"]}`, bearer(bob.token)...); a.status != 202 {
		t.Fatalf("bob: %d %s", a.status, a.body)
	}
}

// deleteKeys removes every key under prefix.
func deleteKeys(t testing.TB, addr, prefix string) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Errorf("cannot clean Redis: %v", err)
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys, err := c.Do(ctx, c.B().Keys().Pattern("{"+prefix+"}:*").Build()).AsStrSlice()
	if err != nil {
		t.Errorf("cannot list keys: %v", err)
		return
	}
	for _, k := range keys {
		c.Do(ctx, c.B().Del().Key(k).Build())
	}
}

func TestProcessCanaryAndSignedIdentity(t *testing.T) {
	b := newBed(t)
	ms := []*master{b.startMaster("stable-1", 0), b.startMaster("canary-1", 0)}
	stable, canary := ms[0], ms[1]
	alice, bob := registerOn(t, ms, "alice"), registerOn(t, ms, "bob")
	g := b.startGateway("gw", []string{fmt.Sprintf("CANARY_USER_IDS=%d", bob.id)},
		"--masters", stable.url, "--canary-masters", canary.url)

	check := func(name string, wantMaster, wantSvc string, header ...string) {
		t.Helper()
		a := do(t, "GET", g.url+"/api/monitor/health", "", header...)
		got := healthMaster(t, a)
		wantCanary := fmt.Sprint(wantSvc == discovery.ServiceCanary)
		if got != wantMaster || a.header.Get("X-Upstream-Service") != wantSvc || a.header.Get("X-Canary") != wantCanary {
			t.Errorf("%s: master %s, X-Upstream-Service %s, X-Canary %s; want %s, %s", name, got,
				a.header.Get("X-Upstream-Service"), a.header.Get("X-Canary"), wantMaster, wantSvc)
		}
	}
	check("plain", "stable-1", discovery.ServiceStable, bearer(alice.token)...)
	check("X-Canary: true", "canary-1", discovery.ServiceCanary, append(bearer(alice.token), "X-Canary", "true")...)
	check("whitelisted user", "canary-1", discovery.ServiceCanary, bearer(bob.token)...)
	check("client-sent X-User-Id", "stable-1", discovery.ServiceStable, append(bearer(alice.token), "X-User-Id", fmt.Sprint(bob.id))...)

	// Through the gateway the masters know the caller from the signed headers.
	a := do(t, "GET", g.url+"/api/auth/me", "", bearer(bob.token)...)
	if a.status != 200 || !strings.Contains(string(a.body), `"username":"bob"`) {
		t.Fatalf("me as bob on the canary: %d %s", a.status, a.body)
	}

	// Capture what a gateway sends for bob (an in-process one with the same
	// secrets, in front of a recorder), then replay it to a master directly.
	rec, seen := recordUpstream(t)
	_, ipURL := startGW(t, gateway.Config{JWTSecret: []byte(b.jwtSecret), SharedSecret: []byte(b.shared), HealthInterval: time.Hour},
		[]string{rec}, nil)
	if a := do(t, "GET", ipURL+"/api/auth/me", "", bearer(bob.token)...); a.status != 200 {
		t.Fatalf("capture: %d", a.status)
	}
	captured := <-seen
	replay := func(path string, change ...string) answer {
		t.Helper()
		hs := []string{}
		for _, k := range []string{"X-Trace-Id", signature.HeaderForwardedHost, signature.HeaderUserID, signature.HeaderUserName,
			signature.HeaderUserRole, signature.HeaderTokenVersion, signature.HeaderTimestamp, signature.HeaderNonce,
			signature.HeaderClientIP, signature.HeaderSignature} {
			hs = append(hs, k, captured.Get(k))
		}
		return do(t, "GET", stable.url+path, "", append(hs, change...)...) // later pairs win
	}
	for name, c := range map[string][]string{
		"another user":       {signature.HeaderUserID, fmt.Sprint(alice.id), signature.HeaderUserName, "alice"},
		"another role":       {signature.HeaderUserRole, "ADMIN"},
		"another trace id":   {"X-Trace-Id", "replayed-trace"},
		"another timestamp":  {signature.HeaderTimestamp, signature.Timestamp(time.Now().Add(time.Second))},
		"another nonce":      {signature.HeaderNonce, "another-nonce"},
		"another host":       {signature.HeaderForwardedHost, "evil.example"},
		"no signature":       {signature.HeaderSignature, ""},
		"a forged signature": {signature.HeaderSignature, strings.Repeat("0", 64)},
	} {
		if a := replay("/api/auth/me", c...); a.status != 401 {
			t.Errorf("replayed with %s: %d %s", name, a.status, a.body)
		}
	}
	if a := replay("/api/tasks"); a.status != 401 {
		t.Errorf("replayed on another path: %d %s", a.status, a.body)
	}
	if a := replay("/api/auth/me?limit=1"); a.status != 401 {
		t.Errorf("replayed with another query: %d %s", a.status, a.body)
	}
	// The captured request (which the recorder, not this master, got) is
	// taken once; the same again is a replay.
	if a := replay("/api/auth/me"); a.status != 200 || !strings.Contains(string(a.body), `"username":"bob"`) {
		t.Fatalf("the captured request itself: %d %s", a.status, a.body)
	}
	if a := replay("/api/auth/me"); a.status != 401 {
		t.Fatalf("the captured request a second time: %d %s", a.status, a.body)
	}
	// Freshness: a correct signature over an old timestamp is refused.
	signer := signature.NewSigner([]byte(b.shared))
	sign := func(ts time.Time) answer {
		var req fasthttp.Request
		req.Header.SetMethod("GET")
		req.Header.SetRequestURI("/api/auth/me")
		hs := []string{"X-Trace-Id", "fresh-trace", signature.HeaderUserID, fmt.Sprint(bob.id), signature.HeaderUserName, "bob",
			signature.HeaderUserRole, "USER", signature.HeaderTokenVersion, "0", signature.HeaderTimestamp, signature.Timestamp(ts),
			signature.HeaderNonce, "fresh-" + ts.String()}
		for i := 0; i < len(hs); i += 2 {
			req.Header.Set(hs[i], hs[i+1])
		}
		f := signature.Of(&req)
		return do(t, "GET", stable.url+"/api/auth/me", "", append(hs, signature.HeaderSignature, signer.Sign(&f))...)
	}
	if a := sign(time.Now()); a.status != 200 {
		t.Fatalf("freshly signed: %d %s", a.status, a.body)
	}
	if a := sign(time.Now().Add(-6 * time.Minute)); a.status != 401 {
		t.Fatalf("signed 6 minutes ago (skew 300 s): %d %s", a.status, a.body)
	}

	// GATEWAY_REQUIRE: only what the gateway signed, even with a good token.
	strict := b.startMaster("strict-1", 0, "GATEWAY_REQUIRE=true")
	carol := registerOn(t, []*master{strict}, "carol")
	if a := do(t, "GET", strict.url+"/api/auth/me", "", bearer(carol.token)...); a.status != 401 {
		t.Fatalf("token straight to a GATEWAY_REQUIRE master: %d %s", a.status, a.body)
	}
	g2 := b.startGateway("gw-strict", nil, "--masters", strict.url)
	if a := do(t, "GET", g2.url+"/api/auth/me", "", bearer(carol.token)...); a.status != 200 {
		t.Fatalf("through the gateway to a GATEWAY_REQUIRE master: %d %s", a.status, a.body)
	}
}

func TestProcessMasterEjectedAndBack(t *testing.T) {
	b := newBed(t)
	ms := []*master{b.startMaster("m-a", 0), b.startMaster("m-b", 0)}
	alice := registerOn(t, ms, "alice")
	g := b.startGateway("gw", []string{"RATE_LIMIT_ENABLED=false"}, "--masters", ms[0].url+","+ms[1].url)
	seen := func(n int) map[string]int {
		got := map[string]int{}
		for i := 0; i < n; i++ {
			got[healthMaster(t, do(t, "GET", g.url+"/api/monitor/health", "", bearer(alice.token)...))]++
		}
		return got
	}
	if got := seen(10); got["m-a"] == 0 || got["m-b"] == 0 {
		t.Fatalf("not balanced over both masters: %v", got)
	}
	ms[1].signal(t, syscall.SIGKILL)
	// Requests keep working: a refused connection goes to the other master,
	// submissions included.
	for i := 0; i < 3; i++ {
		if a := do(t, "POST", g.url+"/api/train", `{"command":["/bin/true"]}`, bearer(alice.token)...); a.status != 202 {
			t.Fatalf("submission %d with a master down: %d %s", i, a.status, a.body)
		}
	}
	if got := seen(10); got["m-a"] != 10 {
		t.Fatalf("with m-b down: %v", got)
	}
	eventually(t, 10*time.Second, func() (bool, string) {
		in, ok := instance(routes(t, g.url, alice.token), ms[1].url)
		return ok && !in.Available && !in.Healthy, fmt.Sprintf("m-b in the routes: %+v", in)
	})
	b.restart(ms[1])
	eventually(t, 15*time.Second, func() (bool, string) {
		in, ok := instance(routes(t, g.url, alice.token), ms[1].url)
		return ok && in.Available, fmt.Sprintf("m-b in the routes: %+v", in)
	})
	eventually(t, 10*time.Second, func() (bool, string) {
		got := seen(10)
		return got["m-b"] > 0, fmt.Sprintf("m-b gets no traffic: %v", got)
	})
}

func TestProcessFallbackWithinTimeout(t *testing.T) {
	b := newBed(t)
	g := b.startGateway("gw", []string{"FALLBACK_TIMEOUT_MS=600"}, "--masters", hangUpstream(t))
	start := time.Now()
	a := do(t, "GET", g.url+"/api/monitor/health", "", "X-Trace-Id", "hang-1")
	d := time.Since(start)
	if a.status != http.StatusServiceUnavailable || !strings.Contains(string(a.body), `"status":"SERVICE_UNAVAILABLE"`) ||
		!strings.Contains(string(a.body), `"traceId":"hang-1"`) {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if d < 600*time.Millisecond || d > 2500*time.Millisecond {
		t.Fatalf("answered after %v, want just after FALLBACK_TIMEOUT_MS=600", d)
	}
}
