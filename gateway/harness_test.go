package gateway_test

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/gateway"
	"github.com/rlsched/rlsched/gateway/discovery"
	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// Tests here run real sockets: in-process gateways in front of small fake
// upstreams, and (the *Process tests) real `rlsched master`, `rlsched worker`
// and `rlsched gateway` processes of a rig cluster. Every wait polls with a
// deadline.

func TestMain(m *testing.M) { rig.Main(m) }

var (
	wiredOnce sync.Once
	wiredMsg  string
)

// requireMasterWiring skips (fails under CI=true) when the binary's master
// lacks the gateway settings (cmd/rlsched/mastergw.go wired into master.go).
func requireMasterWiring(t testing.TB) {
	t.Helper()
	bin := rig.Bin(t)
	wiredOnce.Do(func() {
		out, _ := exec.Command(bin, "master", "--help").CombinedOutput()
		if !bytes.Contains(out, []byte("gateway-trust-headers")) || !bytes.Contains(out, []byte("nacos-addr")) {
			wiredMsg = "this rlsched master has no gateway settings: wire cmd/rlsched/mastergw.go into master.go"
		}
	})
	if wiredMsg != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(wiredMsg)
		}
		t.Skip(wiredMsg)
	}
}

// ---- processes ----

// bed is one process test's cluster; its servers share the gateway's
// secret and know the JWT secret.
type bed struct {
	*rig.Cluster
	shared string // GATEWAY_SHARED_SECRET
}

type (
	proc    = rig.Proc
	master  = rig.Master
	logLine = rig.Line
	gw      = rig.Gateway
)

func newBed(t *testing.T) *bed {
	t.Helper()
	b := &bed{Cluster: rig.New(t, "WORKER_HB_TTL_SECONDS=3", "WORKER_TASK_TTL_SECONDS=6"), shared: "gw-" + rig.RandHex(16)}
	t.Parallel()
	b.Env = append(b.Env, "JWT_SECRET="+b.JWTSecret, "GATEWAY_SHARED_SECRET="+b.shared)
	return b
}

// startMaster runs a master on SQLite in its own data dir, trusting the
// gateway's signature; port 0 picks a free one (kept for restarts).
func (b *bed) startMaster(name string, port int, extraEnv ...string) *master {
	b.T.Helper()
	requireMasterWiring(b.T)
	return b.StartMaster(name, rig.MasterOpts{HTTPPort: port, ID: name,
		Env: append([]string{"GATEWAY_TRUST_HEADERS=true"}, extraEnv...)})
}

// ---- HTTP ----

var httpClient = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

type answer = rig.Response

// do sends a request (see rig.Do), not following redirects; header pairs
// follow the body. It fails t when no answer comes.
func do(t testing.TB, method, url, body string, header ...string) answer {
	t.Helper()
	var b any
	if body != "" {
		b = body
	}
	a, err := rig.Do(httpClient, method, url, "", b, header...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return a
}

// user is a registered user with a token.
type user struct {
	id    int64
	name  string
	role  string
	token string
}

// registerOn registers name on every master directly (each has its own
// SQLite), in the same order everywhere so the ids agree, and logs in.
func registerOn(t testing.TB, masters []*master, name string) user {
	t.Helper()
	var u user
	for _, m := range masters {
		v := rig.NewClient(t, m.URL).Register(name)
		if u.id != 0 && u.id != v.ID {
			t.Fatalf("user %s has id %d on one master and %d on %s", name, u.id, v.ID, m.Opts.ID)
		}
		u.id, u.role = v.ID, v.Role
	}
	u.name = name
	u.token = rig.NewClient(t, masters[0].URL).Login(name, rig.Password).Token
	return u
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// mint signs claims with secret the way the master does (HS256, sub = id).
func mint(t testing.TB, secret string, id int64, name, role string, exp time.Time) string {
	t.Helper()
	c := jwt.MapClaims{"sub": strconv.FormatInt(id, 10), "name": name, "role": role,
		"iat": time.Now().Unix(), "exp": exp.Unix()}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// routes reads /gateway-actuator/gateway/routes with an admin's token.
func routes(t testing.TB, gwURL, adminToken string) gateway.RoutesJSON {
	t.Helper()
	a := do(t, "GET", gwURL+"/gateway-actuator/gateway/routes", "", bearer(adminToken)...)
	if a.Status != 200 {
		t.Fatalf("routes: %d %s", a.Status, a.Body)
	}
	var r gateway.RoutesJSON
	a.JSON(t, &r)
	return r
}

// instance finds url in the routes.
func instance(r gateway.RoutesJSON, url string) (gateway.RouteInstance, bool) {
	for _, rt := range r.Routes {
		for _, in := range rt.Instances {
			if in.URL == url {
				return in, true
			}
		}
	}
	return gateway.RouteInstance{}, false
}

// ---- in-process gateways and fake upstreams ----

const (
	testJWT    = "test-jwt-secret-0123456789"
	testShared = "test-shared-secret-0123456789"
)

// startGW runs an in-process gateway with cfg (secrets filled in) in front of
// the given stable and canary URLs.
func startGW(t testing.TB, cfg gateway.Config, stable, canary []string) (*gateway.Gateway, string) {
	t.Helper()
	if cfg.JWTSecret == nil {
		cfg.JWTSecret = []byte(testJWT)
	}
	if cfg.SharedSecret == nil {
		cfg.SharedSecret = []byte(testShared)
	}
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	set := func(service string, urls []string, canary bool) {
		var insts []gateway.Instance
		for _, u := range urls {
			insts = append(insts, gateway.Instance{URL: u, Service: service, Canary: canary})
		}
		if err := g.SetInstances("static", service, insts); err != nil {
			t.Fatal(err)
		}
	}
	set(discovery.ServiceStable, stable, false)
	set(discovery.ServiceCanary, canary, true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(ln) }()
	t.Cleanup(func() {
		if err := g.Shutdown(); err != nil {
			t.Errorf("gateway shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("gateway serve: %v", err)
		}
	})
	return g, "http://" + ln.Addr().String()
}

// upstream runs handler as a fasthttp server on loopback.
func upstream(t testing.TB, handler fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fasthttp.Server{Handler: handler, StreamRequestBody: true, MaxRequestBodySize: 1 << 30}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Shutdown() })
	return "http://" + ln.Addr().String()
}

// okUpstream answers 200 with its name in the body and in X-Name, and 200
// to health checks.
func okUpstream(t testing.TB, name string) string {
	return upstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("X-Name", name)
		ctx.SetContentType("text/plain")
		ctx.SetBodyString(name)
	})
}

// adminUpstream is okUpstream that answers GET /api/auth/me as a master
// would for a user of role (the gateway asks it before the routes page).
func adminUpstream(t testing.TB, name, role string) string {
	return upstream(t, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/api/auth/me" {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"id":1,"username":"root","role":"` + role + `"}`)
			return
		}
		ctx.Response.Header.Set("X-Name", name)
		ctx.SetContentType("text/plain")
		ctx.SetBodyString(name)
	})
}

// testToken is a valid token of the in-process gateways' secret.
func testToken(t testing.TB, id int64, name, role string) string {
	return mint(t, testJWT, id, name, role, time.Now().Add(time.Hour))
}
