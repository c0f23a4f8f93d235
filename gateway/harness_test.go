package gateway_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/gateway/discovery"
	"github.com/rlsched/rlsched/internal/testkit/testutil"

	"github.com/golang-jwt/jwt/v5"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/gateway"
	"github.com/rlsched/rlsched/internal/testkit/testbin"
)

// Tests here run real sockets: in-process gateways in front of small fake
// upstreams, and (the *Process tests) real `rlsched master`, `rlsched worker`
// and `rlsched gateway` processes, built once per run ($RLSCHED_BIN when
// set). Every wait polls with a deadline.

const password = "a-long-password"

// eventually is testutil.Eventually.
var eventually = testutil.Eventually

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ---- the binary ----

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// rlschedBin returns the binary under test, building it on first use.
func rlschedBin(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("process test: skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("process tests need Linux")
	}
	binOnce.Do(func() {
		// The temporary binary lives as long as the test process.
		binPath, _, binErr = testbin.Build("gateway")
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

var (
	wiredOnce sync.Once
	wiredMsg  string
)

// requireMasterWiring skips (fails under CI=true) when the binary's master
// lacks the gateway settings (cmd/rlsched/mastergw.go wired into master.go).
func requireMasterWiring(t testing.TB) {
	t.Helper()
	bin := rlschedBin(t)
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

// bed is one process test's world; everything it started dies with it.
type bed struct {
	t                          *testing.T
	dir                        string
	jwtSecret, shared, joinTok string

	mu    sync.Mutex
	procs []*proc
	n     int
}

func newBed(t *testing.T) *bed {
	t.Helper()
	rlschedBin(t)
	t.Parallel()
	// Runs under uids of their own (a worker run as root) must reach the
	// workers' data dirs in here.
	b := &bed{t: t, dir: testutil.ReachableTempDir(t), jwtSecret: "jwt-" + randHex(16), shared: "gw-" + randHex(16), joinTok: "join-" + randHex(16)}
	t.Cleanup(b.cleanup)
	return b
}

// env is a server's environment: the test's own minus every rlsched
// setting, plus JSON logs and the bed's secrets.
func (b *bed) env(extra ...string) []string {
	drop := map[string]bool{}
	for _, k := range strings.Fields(`JWT_SECRET WORKER_JOIN_TOKEN MASTER_PORT RPC_PORT GATEWAY_PORT SQLITE_PATH LOG_DIR
		MYSQL_DSN REDIS_ADDR REDIS_PREFIX ARTIFACT_DIR LOG_FORMAT LOG_LEVEL NACOS_ADDR NACOS_USERNAME NACOS_PASSWORD
		NACOS_NAMESPACE NACOS_GROUP SERVICE_NAME JWT_ENFORCE CANARY_USER_IDS CANARY_PERCENT FALLBACK_ENABLED
		FALLBACK_TIMEOUT_MS RATE_LIMIT_ENABLED RATE_LIMIT_WINDOW_SECONDS RATE_LIMIT_MAX_REQUESTS`) {
		drop[k] = true
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if drop[k] || strings.HasPrefix(k, "RLSCHED_") || strings.HasPrefix(k, "GATEWAY_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "LOG_FORMAT=json", "LOG_LEVEL=info", "JWT_SECRET="+b.jwtSecret,
		"GATEWAY_SHARED_SECRET="+b.shared, "WORKER_JOIN_TOKEN="+b.joinTok,
		"WORKER_HB_TTL_SECONDS=3", "WORKER_TASK_TTL_SECONDS=6")
	return append(env, extra...)
}

type proc struct {
	name    string
	cmd     *exec.Cmd
	errPath string
	done    chan struct{}
	waitErr error
}

func (b *bed) start(name string, env []string, args ...string) *proc {
	b.t.Helper()
	b.mu.Lock()
	b.n++
	base := filepath.Join(b.dir, fmt.Sprintf("%02d-%s", b.n, name))
	b.mu.Unlock()
	p := &proc{name: name, errPath: base + ".stderr", done: make(chan struct{})}
	errf, err := os.Create(p.errPath)
	if err != nil {
		b.t.Fatal(err)
	}
	defer errf.Close()
	p.cmd = exec.Command(rlschedBin(b.t), args...)
	p.cmd.Env = env
	p.cmd.Dir = b.dir
	p.cmd.Stdout, p.cmd.Stderr = errf, errf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		b.t.Fatalf("cannot start rlsched %v: %v", args, err)
	}
	go func() { p.waitErr = p.cmd.Wait(); close(p.done) }()
	b.mu.Lock()
	b.procs = append(b.procs, p)
	b.mu.Unlock()
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig and waits until the process is gone.
func (p *proc) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not exit within 15 s of %v", p.name, sig)
	}
}

func (p *proc) stderr() string {
	b, _ := os.ReadFile(p.errPath)
	return string(b)
}

type logLine map[string]any

func (l logLine) str(k string) string {
	if v, ok := l[k].(string); ok {
		return v
	}
	return ""
}

// waitLog waits for a JSON log line whose message is msg.
func (p *proc) waitLog(t testing.TB, timeout time.Duration, msg string) logLine {
	t.Helper()
	var found logLine
	eventually(t, timeout, func() (bool, string) {
		sc := bufio.NewScanner(strings.NewReader(p.stderr()))
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var l logLine
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.str("message") == msg {
				found = l
				return true, ""
			}
		}
		if p.exited() {
			t.Fatalf("%s exited (%v) before logging %q:\n%s", p.name, p.waitErr, msg, tail(p.stderr(), 30))
		}
		return false, fmt.Sprintf("%s never logged %q", p.name, msg)
	})
	return found
}

func tail(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

func (b *bed) cleanup() {
	b.mu.Lock()
	procs := append([]*proc(nil), b.procs...)
	b.mu.Unlock()
	for _, p := range procs {
		if s := p.stderr(); strings.Contains(s, "panic: ") || strings.Contains(s, `"message":"BUG:`) ||
			strings.Contains(s, "DATA RACE") {
			b.t.Errorf("%s crashed or logged a BUG:\n%s", p.name, tail(s, 60))
		}
	}
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		if !p.exited() {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				b.t.Errorf("%s survived SIGKILL", p.name)
			}
		}
	}
	if b.t.Failed() {
		for _, p := range procs {
			b.t.Logf("---- %s stderr, last lines:\n%s", p.name, tail(p.stderr(), 40))
		}
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// master is a started `rlsched master`.
type master struct {
	*proc
	url, rpc, id string
	port         int
	dataDir      string
	env          []string
}

// startMaster runs a master on SQLite in its own data dir, trusting the
// gateway's signature; port 0 picks a free one (kept for restarts).
func (b *bed) startMaster(name string, port int, extraEnv ...string) *master {
	b.t.Helper()
	requireMasterWiring(b.t)
	if port == 0 {
		port = freePort(b.t)
	}
	m := &master{port: port, dataDir: filepath.Join(b.dir, "data-"+name),
		env: b.env(append([]string{"GATEWAY_TRUST_HEADERS=true", "REGISTRATION=open"}, extraEnv...)...)}
	m.proc = b.start(name, m.env, "master", "--data-dir", m.dataDir, "--bind", "127.0.0.1",
		"--master-port", strconv.Itoa(port), "--rpc-port", "0", "--master-id", name)
	l := m.waitLog(b.t, 30*time.Second, "master started")
	m.url, m.rpc, m.id = l.str("url"), l.str("rpc"), name
	return m
}

// restart starts the master again on its port and data dir.
func (b *bed) restart(m *master) {
	b.t.Helper()
	m.proc = b.start(m.id+"-again", m.env, "master", "--data-dir", m.dataDir, "--bind", "127.0.0.1",
		"--master-port", strconv.Itoa(m.port), "--rpc-port", "0", "--master-id", m.id)
	l := m.waitLog(b.t, 30*time.Second, "master started")
	m.url, m.rpc = l.str("url"), l.str("rpc")
}

func (b *bed) startWorker(name, rpc string) *proc {
	b.t.Helper()
	return b.start(name, b.env(), "worker", "--master", rpc, "--id", name, "--slots", "2", "--gpus", "0",
		"--data-dir", filepath.Join(b.dir, "worker-"+name))
}

// gw is a started `rlsched gateway`.
type gw struct {
	*proc
	url string
}

func (b *bed) startGateway(name string, env []string, args ...string) *gw {
	b.t.Helper()
	args = append([]string{"gateway", "--bind", "127.0.0.1", "--gateway-port", "0", "--health-interval-ms", "300"}, args...)
	p := b.start(name, b.env(env...), args...)
	l := p.waitLog(b.t, 30*time.Second, "gateway started")
	return &gw{proc: p, url: l.str("url")}
}

// ---- HTTP ----

var httpClient = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("answer %d is not JSON: %v\n%s", a.status, err, a.body)
	}
}

// do sends a request; header pairs follow the body.
func do(t testing.TB, method, url, body string, header ...string) answer {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if strings.EqualFold(header[i], "Host") {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return answer{resp.StatusCode, resp.Header, b}
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
		a := do(t, "POST", m.url+"/api/auth/register", fmt.Sprintf(`{"username":%q,"password":%q}`, name, password))
		if a.status != 201 {
			t.Fatalf("register %s on %s: %d %s", name, m.id, a.status, a.body)
		}
		var v struct {
			ID   int64  `json:"id"`
			Role string `json:"role"`
		}
		a.json(t, &v)
		if u.id != 0 && u.id != v.ID {
			t.Fatalf("user %s has id %d on one master and %d on %s", name, u.id, v.ID, m.id)
		}
		u.id, u.role = v.ID, v.Role
	}
	u.name = name
	a := do(t, "POST", masters[0].url+"/api/auth/login", fmt.Sprintf(`{"username":%q,"password":%q}`, name, password))
	if a.status != 200 {
		t.Fatalf("login %s: %d %s", name, a.status, a.body)
	}
	var v struct {
		Token string `json:"token"`
	}
	a.json(t, &v)
	u.token = v.Token
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
	if a.status != 200 {
		t.Fatalf("routes: %d %s", a.status, a.body)
	}
	var r gateway.RoutesJSON
	a.json(t, &r)
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

// testToken is a valid token of the in-process gateways' secret.
func testToken(t testing.TB, id int64, name, role string) string {
	return mint(t, testJWT, id, name, role, time.Now().Add(time.Hour))
}
