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
	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testsvc"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// healthMaster reads which master answered /api/monitor/health.
func healthMaster(t testing.TB, a answer) string {
	t.Helper()
	if a.Status != 200 {
		t.Fatalf("health: %d %s", a.Status, a.Body)
	}
	var h struct{ Master string }
	a.JSON(t, &h)
	return h.Master
}

var hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestProcessTraceIDAuthAndRunLog(t *testing.T) {
	b := newBed(t)
	m := b.startMaster("m1", 0)
	b.StartWorker("w1", m.RPC, rig.WorkerOpts{})
	alice := registerOn(t, []*master{m}, "alice")
	g := b.StartGateway("gw", nil, "--masters", m.URL)

	// Trace ids: made when absent or invalid, echoed when valid, and the
	// master sees the same one.
	a := do(t, "GET", g.URL+"/api/monitor/health", "")
	if !hex32.MatchString(a.Header.Get("X-Trace-Id")) || healthMaster(t, a) != "m1" {
		t.Fatalf("no trace id made: %v", a.Header)
	}
	if a := do(t, "GET", g.URL+"/api/monitor/health", "", "X-Trace-Id", "bad trace!"); !hex32.MatchString(a.Header.Get("X-Trace-Id")) {
		t.Fatalf("an invalid trace id was kept: %v", a.Header)
	}
	a = do(t, "GET", g.URL+"/api/auth/me", "", append(bearer(alice.token), "X-Trace-Id", "gw-trace-me")...)
	if a.Status != 200 || a.Header.Get("X-Trace-Id") != "gw-trace-me" || !strings.Contains(string(a.Body), `"username":"alice"`) {
		t.Fatalf("me: %d %v %s", a.Status, a.Header, a.Body)
	}

	// The trace id of a submission is the first line of its log.
	a = do(t, "POST", g.URL+"/api/train", `{"command":["/bin/echo","hello through the gateway"]}`,
		append(bearer(alice.token), "X-Trace-Id", "gw-trace-run-1")...)
	if a.Status != 202 {
		t.Fatalf("submit: %d %s", a.Status, a.Body)
	}
	var sub struct{ ID, TraceID string }
	a.JSON(t, &sub)
	if sub.TraceID != "gw-trace-run-1" || a.Header.Get("X-Trace-Id") != "gw-trace-run-1" {
		t.Fatalf("submit: %s %v", a.Body, a.Header)
	}
	testutil.Eventually(t, 60*time.Second, func() (bool, string) {
		a := do(t, "GET", g.URL+"/api/tasks/"+sub.ID, "", bearer(alice.token)...)
		var task struct{ Status string }
		a.JSON(t, &task)
		return task.Status == "SUCCEEDED", "run is " + task.Status
	})
	a = do(t, "GET", g.URL+"/api/monitor/logs/"+sub.ID, "", bearer(alice.token)...)
	var logs struct{ Content []string }
	a.JSON(t, &logs)
	if len(logs.Content) < 2 || logs.Content[0] != "TRACE_ID:gw-trace-run-1" || !strings.Contains(strings.Join(logs.Content, "\n"), "hello through the gateway") {
		t.Fatalf("log through the gateway: %s", a.Body)
	}
	f, err := os.Open(filepath.Join(m.Opts.DataDir, "logs", sub.ID+".log"))
	if err != nil {
		t.Fatal(err)
	}
	first, _ := bufio.NewReader(f).ReadString('\n')
	f.Close()
	if first != "TRACE_ID:gw-trace-run-1\n" {
		t.Fatalf("log file starts with %q", first)
	}

	// Authentication at the gateway.
	if a := do(t, "GET", g.URL+"/api/tasks", ""); a.Status != 401 {
		t.Fatalf("no token: %d %s", a.Status, a.Body)
	}
	if a := do(t, "GET", g.URL+"/runs", "", "Accept", "text/html"); a.Status != 302 || a.Header.Get("Location") != "/login?next=%2Fruns" {
		t.Fatalf("HTML without a token: %d %v", a.Status, a.Header)
	}
	parts := strings.Split(alice.token, ".")
	for name, tok := range map[string]string{
		"alg none":  encodeSeg(`{"alg":"none","typ":"JWT"}`) + "." + parts[1] + ".",
		"expired":   mint(t, b.JWTSecret, alice.id, "alice", "ADMIN", time.Now().Add(-time.Minute)),
		"wrong key": mint(t, "not-the-secret-0123456789", alice.id, "alice", "ADMIN", time.Now().Add(time.Hour)),
		"tampered":  parts[0] + "." + encodeSeg(strings.Replace(decodeSeg(t, parts[1]), `"name":"alice"`, `"name":"mallory"`, 1)) + "." + parts[2],
	} {
		if a := do(t, "GET", g.URL+"/api/tasks", "", bearer(tok)...); a.Status != 401 {
			t.Errorf("%s token: %d %s", name, a.Status, a.Body)
		}
	}
	// A client claiming an identity gets nothing for it.
	if a := do(t, "GET", g.URL+"/api/auth/me", "", "X-User-Id", "1", "X-User-Name", "alice", "X-User-Role", "ADMIN"); a.Status != 401 {
		t.Fatalf("client-sent identity: %d %s", a.Status, a.Body)
	}
	if a := do(t, "GET", g.URL+"/gateway-actuator/health", ""); a.Status != 200 {
		t.Fatalf("actuator health: %d %s", a.Status, a.Body)
	}
}

func TestProcessRateLimitSharedThroughRedis(t *testing.T) {
	addr := testsvc.RequireRedis(t)
	b := newBed(t)
	m := b.startMaster("m1", 0)
	alice := registerOn(t, []*master{m}, "alice")
	bob := registerOn(t, []*master{m}, "bob")
	prefix := "rlsched-gwtest-" + rig.RandHex(6)
	t.Cleanup(func() { deleteKeys(t, addr, prefix) })
	env := []string{"REDIS_ADDR=" + addr, "REDIS_PREFIX=" + prefix}
	g1 := b.StartGateway("gw1", env, "--masters", m.URL)
	g2 := b.StartGateway("gw2", env, "--masters", m.URL)
	for i, g := range []*gw{g1, g2, g1} {
		a := do(t, "POST", g.URL+"/api/train", `{"command":["/bin/true"]}`, bearer(alice.token)...)
		if a.Status != 202 || a.Header.Get("X-RateLimit-Remaining") != fmt.Sprint(2-i) {
			t.Fatalf("submission %d: %d %v %s", i+1, a.Status, a.Header, a.Body)
		}
	}
	a := do(t, "POST", g2.URL+"/api/train", `{"command":["/bin/true"]}`, bearer(alice.token)...)
	if a.Status != 429 || a.Header.Get("X-RateLimit-Limit") != "3" || a.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("4th submission through the other gateway: %d %v %s", a.Status, a.Header, a.Body)
	}
	if ra := a.Header.Get("Retry-After"); ra == "" || ra == "0" || len(ra) > 2 {
		t.Fatalf("Retry-After %q", ra)
	}
	// Another user has a budget of their own.
	if a := do(t, "POST", g2.URL+"/api/train", `{"command":["/bin/true"]}`, bearer(bob.token)...); a.Status != 202 {
		t.Fatalf("bob: %d %s", a.Status, a.Body)
	}
	// A sweep counts its members (issue 25): bob's sweep of 4 is admitted
	// as his second submission, and its members use up the rest, on both
	// gateways.
	sweep := `{"base":{"command":["/bin/true"]},"grid":{"a":[1,2,3,4]}}`
	if a := do(t, "POST", g1.URL+"/api/sweeps", sweep, bearer(bob.token)...); a.Status != 202 {
		t.Fatalf("bob's sweep: %d %s", a.Status, a.Body)
	}
	if a := do(t, "POST", g2.URL+"/api/train", `{"command":["/bin/true"]}`, bearer(bob.token)...); a.Status != 429 {
		t.Fatalf("bob's submission after a sweep of 4: %d %s, want 429", a.Status, a.Body)
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
	g := b.StartGateway("gw", []string{fmt.Sprintf("CANARY_USER_IDS=%d", bob.id)},
		"--masters", stable.URL, "--canary-masters", canary.URL)

	check := func(name string, wantMaster, wantSvc string, header ...string) {
		t.Helper()
		a := do(t, "GET", g.URL+"/api/monitor/health", "", header...)
		got := healthMaster(t, a)
		wantCanary := fmt.Sprint(wantSvc == discovery.ServiceCanary)
		if got != wantMaster || a.Header.Get("X-Upstream-Service") != wantSvc || a.Header.Get("X-Canary") != wantCanary {
			t.Errorf("%s: master %s, X-Upstream-Service %s, X-Canary %s; want %s, %s", name, got,
				a.Header.Get("X-Upstream-Service"), a.Header.Get("X-Canary"), wantMaster, wantSvc)
		}
	}
	check("plain", "stable-1", discovery.ServiceStable, bearer(alice.token)...)
	check("X-Canary: true", "canary-1", discovery.ServiceCanary, append(bearer(alice.token), "X-Canary", "true")...)
	check("whitelisted user", "canary-1", discovery.ServiceCanary, bearer(bob.token)...)
	check("client-sent X-User-Id", "stable-1", discovery.ServiceStable, append(bearer(alice.token), "X-User-Id", fmt.Sprint(bob.id))...)

	// Through the gateway the masters know the caller from the signed headers.
	a := do(t, "GET", g.URL+"/api/auth/me", "", bearer(bob.token)...)
	if a.Status != 200 || !strings.Contains(string(a.Body), `"username":"bob"`) {
		t.Fatalf("me as bob on the canary: %d %s", a.Status, a.Body)
	}

	// Capture what a gateway sends for bob (an in-process one with the same
	// secrets, in front of a recorder), then replay it to a master directly.
	rec, seen := recordUpstream(t)
	_, ipURL := startGW(t, gateway.Config{JWTSecret: []byte(b.JWTSecret), SharedSecret: []byte(b.shared), HealthInterval: time.Hour},
		[]string{rec}, nil)
	if a := do(t, "GET", ipURL+"/api/auth/me", "", bearer(bob.token)...); a.Status != 200 {
		t.Fatalf("capture: %d", a.Status)
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
		return do(t, "GET", stable.URL+path, "", append(hs, change...)...) // later pairs win
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
		if a := replay("/api/auth/me", c...); a.Status != 401 {
			t.Errorf("replayed with %s: %d %s", name, a.Status, a.Body)
		}
	}
	if a := replay("/api/tasks"); a.Status != 401 {
		t.Errorf("replayed on another path: %d %s", a.Status, a.Body)
	}
	if a := replay("/api/auth/me?limit=1"); a.Status != 401 {
		t.Errorf("replayed with another query: %d %s", a.Status, a.Body)
	}
	// The captured request (which the recorder, not this master, got) is
	// taken once; the same again is a replay.
	if a := replay("/api/auth/me"); a.Status != 200 || !strings.Contains(string(a.Body), `"username":"bob"`) {
		t.Fatalf("the captured request itself: %d %s", a.Status, a.Body)
	}
	if a := replay("/api/auth/me"); a.Status != 401 {
		t.Fatalf("the captured request a second time: %d %s", a.Status, a.Body)
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
		return do(t, "GET", stable.URL+"/api/auth/me", "", append(hs, signature.HeaderSignature, signer.Sign(&f))...)
	}
	if a := sign(time.Now()); a.Status != 200 {
		t.Fatalf("freshly signed: %d %s", a.Status, a.Body)
	}
	if a := sign(time.Now().Add(-6 * time.Minute)); a.Status != 401 {
		t.Fatalf("signed 6 minutes ago (skew 300 s): %d %s", a.Status, a.Body)
	}

	// GATEWAY_REQUIRE: only what the gateway signed, even with a good token.
	strict := b.startMaster("strict-1", 0, "GATEWAY_REQUIRE=true")
	carol := registerOn(t, []*master{strict}, "carol")
	if a := do(t, "GET", strict.URL+"/api/auth/me", "", bearer(carol.token)...); a.Status != 401 {
		t.Fatalf("token straight to a GATEWAY_REQUIRE master: %d %s", a.Status, a.Body)
	}
	g2 := b.StartGateway("gw-strict", nil, "--masters", strict.URL)
	if a := do(t, "GET", g2.URL+"/api/auth/me", "", bearer(carol.token)...); a.Status != 200 {
		t.Fatalf("through the gateway to a GATEWAY_REQUIRE master: %d %s", a.Status, a.Body)
	}
}

func TestProcessMasterEjectedAndBack(t *testing.T) {
	b := newBed(t)
	ms := []*master{b.startMaster("m-a", 0), b.startMaster("m-b", 0)}
	alice := registerOn(t, ms, "alice")
	g := b.StartGateway("gw", []string{"RATE_LIMIT_ENABLED=false"}, "--masters", ms[0].URL+","+ms[1].URL)
	seen := func(n int) map[string]int {
		got := map[string]int{}
		for i := 0; i < n; i++ {
			got[healthMaster(t, do(t, "GET", g.URL+"/api/monitor/health", "", bearer(alice.token)...))]++
		}
		return got
	}
	if got := seen(10); got["m-a"] == 0 || got["m-b"] == 0 {
		t.Fatalf("not balanced over both masters: %v", got)
	}
	ms[1].Stop(t, syscall.SIGKILL, 15*time.Second)
	// Requests keep working: a refused connection goes to the other master,
	// submissions included.
	for i := 0; i < 3; i++ {
		if a := do(t, "POST", g.URL+"/api/train", `{"command":["/bin/true"]}`, bearer(alice.token)...); a.Status != 202 {
			t.Fatalf("submission %d with a master down: %d %s", i, a.Status, a.Body)
		}
	}
	if got := seen(10); got["m-a"] != 10 {
		t.Fatalf("with m-b down: %v", got)
	}
	testutil.Eventually(t, 10*time.Second, func() (bool, string) {
		in, ok := instance(routes(t, g.URL, alice.token), ms[1].URL)
		return ok && !in.Available && !in.Healthy, fmt.Sprintf("m-b in the routes: %+v", in)
	})
	b.Restart(ms[1])
	testutil.Eventually(t, 15*time.Second, func() (bool, string) {
		in, ok := instance(routes(t, g.URL, alice.token), ms[1].URL)
		return ok && in.Available, fmt.Sprintf("m-b in the routes: %+v", in)
	})
	testutil.Eventually(t, 10*time.Second, func() (bool, string) {
		got := seen(10)
		return got["m-b"] > 0, fmt.Sprintf("m-b gets no traffic: %v", got)
	})
}

func TestProcessFallbackWithinTimeout(t *testing.T) {
	b := newBed(t)
	g := b.StartGateway("gw", []string{"FALLBACK_TIMEOUT_MS=600"}, "--masters", hangUpstream(t))
	start := time.Now()
	a := do(t, "GET", g.URL+"/api/monitor/health", "", "X-Trace-Id", "hang-1")
	d := time.Since(start)
	if a.Status != http.StatusServiceUnavailable || !strings.Contains(string(a.Body), `"status":"SERVICE_UNAVAILABLE"`) ||
		!strings.Contains(string(a.Body), `"traceId":"hang-1"`) {
		t.Fatalf("%d %s", a.Status, a.Body)
	}
	if d < 600*time.Millisecond || d > 2500*time.Millisecond {
		t.Fatalf("answered after %v, want just after FALLBACK_TIMEOUT_MS=600", d)
	}
}

// TestProcessRoutesForAdminsNow (issue 25): the routes page asks a master
// who the caller is now: an admin demoted since their token was issued,
// whose token still says ADMIN, is refused.
func TestProcessRoutesForAdminsNow(t *testing.T) {
	b := newBed(t)
	m := b.startMaster("m1", 0)
	alice := registerOn(t, []*master{m}, "alice") // the first user: an admin
	bob := registerOn(t, []*master{m}, "bob")
	g := b.StartGateway("gw", []string{"RATE_LIMIT_ENABLED=false"}, "--masters", m.URL)
	if a := do(t, "PATCH", g.URL+"/api/admin/users/bob", `{"role":"ADMIN"}`, append(bearer(alice.token), "Content-Type", "application/json")...); a.Status != 200 {
		t.Fatalf("alice makes bob an admin: %d %s", a.Status, a.Body)
	}
	bob.token = rig.NewClient(t, m.URL).Login("bob", rig.Password).Token // a token that says ADMIN
	routes(t, g.URL, bob.token)
	if a := do(t, "PATCH", g.URL+"/api/admin/users/bob", `{"role":"USER"}`, append(bearer(alice.token), "Content-Type", "application/json")...); a.Status != 200 {
		t.Fatalf("alice demotes bob: %d %s", a.Status, a.Body)
	}
	if a := do(t, "GET", g.URL+"/gateway-actuator/gateway/routes", "", bearer(bob.token)...); a.Status != 403 {
		t.Fatalf("routes for a demoted admin's old token: %d %s", a.Status, a.Body)
	}
	routes(t, g.URL, alice.token)
}
