package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// The gateway scenario (issue 6): GET and POST through `rlsched gateway` with
// every filter on (trace id, JWT, rate limit, canary choice, signing,
// fallback), beside the same requests straight to the master and through
// nginx as a plain reverse proxy (keep-alive upstream, access log off), all
// in the same run against one master.

const benchGatewaySecret = "bench-gateway-secret-0123456789"

// gwReq is one kind of request of the scenario.
type gwReq struct {
	name   string
	method string
	path   string
	body   []byte
	token  string
	want   int
}

// gwTarget is one way to the master.
type gwTarget struct {
	name string
	pid  int  // the proxy process (0: none)
	tree bool // count the CPU of pid's children too (nginx workers)
	hc   *fasthttp.HostClient
}

func newGWTarget(name, base string, pid int, conns int) *gwTarget {
	return &gwTarget{name: name, pid: pid, hc: &fasthttp.HostClient{Addr: strings.TrimPrefix(base, "http://"),
		MaxConns: conns, ReadTimeout: 30 * time.Second, WriteTimeout: 10 * time.Second, MaxIdleConnDuration: time.Minute}}
}

func (t *gwTarget) do(r gwReq) error {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + t.hc.Addr + r.path)
	req.Header.SetMethod(r.method)
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.body != nil {
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(r.body)
	}
	if err := t.hc.Do(req, resp); err != nil {
		return err
	}
	if resp.StatusCode() != r.want {
		return fmt.Errorf("HTTP %d: %.200s", resp.StatusCode(), resp.Body())
	}
	return nil
}

func (t *gwTarget) closedLoop(r gwReq, conns int, warm, d time.Duration) *loadResult {
	res := &loadResult{}
	var ok, errs atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	measureFrom := time.Now().Add(warm)
	stop := measureFrom.Add(d)
	for range conns {
		wg.Go(func() {
			for {
				sent := time.Now()
				if sent.After(stop) {
					return
				}
				err := t.do(r)
				lat := time.Since(sent)
				if sent.Before(measureFrom) {
					continue
				}
				mu.Lock()
				if err != nil {
					errs.Add(1)
					if res.firstErr == "" {
						res.firstErr = err.Error()
					}
				} else {
					ok.Add(1)
					res.lat.AddDuration(lat)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.ok, res.errs, res.elapsed = ok.Load(), errs.Load(), d
	return res
}

// openLoop sends rate requests per second on a fixed schedule for d.
func (t *gwTarget) openLoop(r gwReq, rate int, d time.Duration, maxInFlight int) *loadResult {
	res := &loadResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxInFlight)
	start := time.Now()
	interval := time.Second / time.Duration(max(rate, 1))
	for i := 0; i < int(d/interval); i++ {
		if w := time.Until(start.Add(time.Duration(i) * interval)); w > 0 {
			time.Sleep(w)
		}
		select {
		case sem <- struct{}{}:
		default:
			res.skipped++
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			sent := time.Now()
			err := t.do(r)
			lat := time.Since(sent)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.errs++
				if res.firstErr == "" {
					res.firstErr = err.Error()
				}
				return
			}
			res.ok++
			res.lat.AddDuration(lat)
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

// cpu is the CPU time of the target's proxy process (and its children).
func (t *gwTarget) cpu() time.Duration {
	if t.pid == 0 {
		return 0
	}
	pids := []int{t.pid}
	if t.tree {
		pids = append(pids, gwChildPIDs(t.pid)...)
	}
	var total time.Duration
	for _, p := range pids {
		u, s, _ := procCPU(p)
		total += u + s
	}
	return total
}

func gwChildPIDs(parent int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == strconv.Itoa(parent) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// gwWaitHTTP polls url until it answers 200.
func gwWaitHTTP(url string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("the process exited at start")
		default:
		}
		if resp, err := c.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer 200 within %v", url, timeout)
}

// startBenchGateway runs `rlsched gateway` in front of masterURL with every
// filter on; the rate limit admits far more than the load so that the
// limiter's script runs on every submission without refusing.
func (e *env) startBenchGateway(masterURL string) (*exec.Cmd, string, error) {
	bin, err := e.rlschedBin()
	if err != nil {
		return nil, "", err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	logf, err := os.Create(filepath.Join(e.tmp, fmt.Sprintf("gateway-%d.log", time.Now().UnixNano())))
	if err != nil {
		return nil, "", err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "gateway", "--bind", "127.0.0.1", "--gateway-port", strconv.Itoa(port), "--masters", masterURL)
	cmd.Env = append(os.Environ(), "JWT_SECRET="+benchJWTSecret, "GATEWAY_SHARED_SECRET="+benchGatewaySecret,
		"JWT_ENFORCE=true", "RATE_LIMIT_ENABLED=true", "RATE_LIMIT_WINDOW_SECONDS=1", "RATE_LIMIT_MAX_REQUESTS=1000000000",
		"CANARY_USER_IDS=999999", "CANARY_PERCENT=10", "FALLBACK_ENABLED=true", "FALLBACK_TIMEOUT_MS=5000",
		"LOG_FORMAT=json", "LOG_LEVEL=info")
	if e.profDir != "" { // profiled beside the master (-profile)
		cmd.Env = append(cmd.Env, "RLSCHED_BENCH_PROFILE_DIR="+e.profDir)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := e.start(cmd); err != nil {
		return nil, "", fmt.Errorf("cannot start rlsched gateway: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := gwWaitHTTP(url+"/gateway-actuator/health", exited, 30*time.Second); err != nil {
		return nil, "", fmt.Errorf("rlsched gateway: %w (log %s)", err, logf.Name())
	}
	return cmd, url, nil
}

// startNginx runs Debian's nginx as a plain reverse proxy to masterURL with
// a keep-alive upstream; ok is false when nginx is not installed. nginx
// names the master by its own address in Host, as the rlsched gateway
// does: the master answers only to its own names (PUBLIC_HOSTS), and
// nginx's default ($proxy_host, the upstream's name) or the client's Host
// got every request a 421.
func (e *env) startNginx(masterURL string) (cmd *exec.Cmd, url string, ok bool, err error) {
	bin, lerr := exec.LookPath("nginx")
	if lerr != nil {
		for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, lerr = p, nil
			}
		}
	}
	if lerr != nil {
		return nil, "", false, nil
	}
	port, err := freePort()
	if err != nil {
		return nil, "", true, err
	}
	dir := filepath.Join(e.tmp, "nginx")
	for _, d := range []string{"logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, "", true, err
		}
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root root;" // workers may then read the temporary directories
	}
	conf := fmt.Sprintf(`%s
worker_processes %d;
pid %[3]s/nginx.pid;
error_log %[3]s/logs/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path %[3]s/tmp/body;
  proxy_temp_path %[3]s/tmp/proxy;
  fastcgi_temp_path %[3]s/tmp/fastcgi;
  uwsgi_temp_path %[3]s/tmp/uwsgi;
  scgi_temp_path %[3]s/tmp/scgi;
  upstream master { server %[4]s; keepalive 128; }
  server {
    listen 127.0.0.1:%[5]d;
    location / {
      proxy_pass http://master;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host %[4]s;
    }
  }
}
`, user, runtime.NumCPU(), dir, strings.TrimPrefix(masterURL, "http://"), port)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, "", true, err
	}
	cmd = exec.Command(bin, "-p", dir, "-c", path, "-g", "daemon off;")
	logf, err := os.Create(filepath.Join(dir, "logs", "stderr.log"))
	if err != nil {
		return nil, "", true, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := e.start(cmd); err != nil {
		return nil, "", true, fmt.Errorf("cannot start nginx: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	url = fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := gwWaitHTTP(url+"/api/monitor/health", exited, 20*time.Second); err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "logs", "error.log"))
		return nil, "", true, fmt.Errorf("nginx: %w\n%s", err, lastLines(b, 8))
	}
	return cmd, url, true, nil
}

type gwRun struct {
	rates      []float64
	p50s, p99s []time.Duration
	errs, ok   int64
	cpu        time.Duration
	firstErr   string
}

func runGatewayBench(e *env) (*report, error) {
	conns := 32
	d := pick(e, 2*time.Second, 5*time.Second)
	repeats := pick(e, 1, 3)
	rep := &report{size: fmt.Sprintf("%d concurrent clients, %v a repeat, median of %d", conns, d, repeats)}

	dataDir, err := e.dir("gateway", true)
	if err != nil {
		return nil, err
	}
	// The master trusts the gateway's signed identity, as in production
	// (read from the environment by `rlsched master`).
	restore := gwSetEnv(map[string]string{"GATEWAY_TRUST_HEADERS": "true", "GATEWAY_SHARED_SECRET": benchGatewaySecret})
	m, err := e.startMaster(masterConf{name: "gateway", dataDir: dataDir})
	restore()
	if err != nil {
		return nil, err
	}
	defer m.stop()
	tok, err := m.login()
	if err != nil {
		return nil, err
	}
	gcmd, gwURL, err := e.startBenchGateway(m.url)
	if err != nil {
		return nil, err
	}
	targets := []*gwTarget{
		newGWTarget("straight to the master", m.url, 0, conns),
		newGWTarget("rlsched gateway, every filter on", gwURL, gcmd.Process.Pid, conns),
	}
	ncmd, nginxURL, haveNginx, err := e.startNginx(m.url)
	if err != nil {
		return nil, err
	}
	if haveNginx {
		nt := newGWTarget("nginx, plain reverse proxy (keep-alive upstream)", nginxURL, ncmd.Process.Pid, conns)
		nt.tree = true
		targets = append(targets, nt)
	} else {
		rep.note("nginx is not installed (apt-get install nginx-light): its column is missing, and the goal against it is judged against the master alone")
	}
	reqs := []gwReq{
		{name: "GET /api/workers", method: "GET", path: "/api/workers", token: tok, want: 200},
		{name: "POST /api/train", method: "POST", path: "/api/train", token: tok, want: 202,
			body: []byte(`{"name":"bench","command":["/bin/true"]}`)},
	}
	runs := map[string]map[string]*gwRun{}
	gwProfiles := 0 // the gateway's, with -profile: one a request kind
	for _, r := range reqs {
		runs[r.name] = map[string]*gwRun{}
		for _, t := range targets {
			run := &gwRun{}
			runs[r.name][t.name] = run
			t.closedLoop(r, conns, 0, 300*time.Millisecond) // warm-up
			for i := 0; i < repeats; i++ {
				prof := i == 0 && t.pid == gcmd.Process.Pid
				if prof {
					gwProfiles++
					e.profileProc(gcmd.Process, gwProfiles, "", true)
				}
				c0 := t.cpu()
				res := t.closedLoop(r, conns, 0, d)
				if prof {
					e.profileProc(gcmd.Process, gwProfiles, "gateway-"+strings.NewReplacer(" ", "-", "/", "_").Replace(r.name), false)
				}
				run.cpu += t.cpu() - c0
				run.rates = append(run.rates, res.rate())
				run.p50s = append(run.p50s, res.lat.QuantileDuration(0.5))
				run.p99s = append(run.p99s, res.lat.QuantileDuration(0.99))
				run.errs += res.errs
				run.ok += res.ok
				if run.firstErr == "" {
					run.firstErr = res.firstErr
				}
				e.logf("%s, %s: %.0f/s p50 %v p99 %v (errors %d)", r.name, t.name, res.rate(),
					res.lat.QuantileDuration(0.5), res.lat.QuantileDuration(0.99), res.errs)
			}
		}
	}
	refName := targets[0].name // the master, or nginx when it runs
	if haveNginx {
		refName = targets[len(targets)-1].name
	}
	for _, r := range reqs {
		tb := rep.newTable(r.name+", closed loop", "path", "req/s (median)", "ratio to "+gwShortName(refName), "p50", "p99",
			"proxy CPU per request", "errors")
		for _, t := range targets {
			run := runs[r.name][t.name]
			cpuPer := "–"
			if t.pid != 0 && run.ok > 0 {
				cpuPer = us(run.cpu / time.Duration(run.ok))
			}
			tb.add(t.name, human(median(run.rates)), ratioStr(median(run.rates), median(runs[r.name][refName].rates)),
				ms(medianDur(run.p50s)), ms(medianDur(run.p99s)), cpuPer, fmt.Sprint(run.errs))
			if run.firstErr != "" {
				rep.note("%s, %s: first error: %s", r.name, t.name, run.firstErr)
			}
		}
	}

	// Latency at half the gateway's peak GET rate, for every path.
	gwName := targets[1].name
	peak := median(runs[reqs[0].name][gwName].rates)
	rate := int(peak / 2)
	lt := rep.newTable(fmt.Sprintf("%s, open loop at %s req/s (50%% of the gateway's peak)", reqs[0].name, human(float64(rate))),
		"path", "p50", "p99", "p99.9", "errors", "skipped")
	var gwP99 time.Duration
	for _, t := range targets {
		// A pool as large as the requests allowed in flight, so that none
		// is refused for want of a connection.
		ot := &gwTarget{name: t.name, hc: &fasthttp.HostClient{Addr: t.hc.Addr, MaxConns: 4 * conns,
			ReadTimeout: 30 * time.Second, WriteTimeout: 10 * time.Second, MaxIdleConnDuration: time.Minute}}
		ot.closedLoop(reqs[0], 4*conns, 0, 200*time.Millisecond) // open the connections
		res := ot.openLoop(reqs[0], rate, d, 4*conns)
		if res.firstErr != "" {
			rep.note("open loop, %s: first error: %s", t.name, res.firstErr)
		}
		lt.add(t.name, ms(res.lat.QuantileDuration(0.5)), ms(res.lat.QuantileDuration(0.99)),
			ms(res.lat.QuantileDuration(0.999)), fmt.Sprint(res.errs), fmt.Sprint(res.skipped))
		if t.name == gwName {
			gwP99 = res.lat.QuantileDuration(0.99)
		}
	}

	gwRate, refRate := peak, median(runs[reqs[0].name][refName].rates)
	if haveNginx {
		// The proxy's CPU a request beside nginx's is what the rate is
		// bound by, on cores shared with the load and the master.
		cpuPer := func(name string) time.Duration {
			r := runs[reqs[0].name][name]
			return r.cpu / time.Duration(max(r.ok, 1))
		}
		rep.goal(gwRate >= refRate, "≥ 1.0× nginx's req/s with every filter on (nginx a plain proxy): %s/s against %s/s (%s×), %s; the gateway's CPU a request %s against nginx's %s (%s×)",
			human(gwRate), human(refRate), ratioStr(gwRate, refRate), reqs[0].name, us(cpuPer(gwName)), us(cpuPer(refName)),
			ratioStr(float64(cpuPer(gwName)), float64(cpuPer(refName))))
	} else {
		rep.goal(false, "≥ 1.0× nginx's req/s: not judged, nginx is not installed (gateway %s/s)", human(gwRate))
	}
	rep.goal(gwP99 <= 5*time.Millisecond, "p99 ≤ 5 ms at half load (50%% of the gateway's peak): %s at %s req/s", ms(gwP99), human(float64(rate)))
	rep.note("The gateway runs every filter: a trace id, the JWT check (HS256), the rate limit on submissions (in-process; its limit set above the load), the canary choice, the signed identity (HMAC-SHA256), and the fallback deadline; the master checks the signature and reads the user, as it would check a token. nginx only proxies (keep-alive upstream, access log off, %d workers). The load generator shares the machine's %d cores with the master and the proxy.", runtime.NumCPU(), runtime.NumCPU())
	ref := "nginx_proxy"
	if !haveNginx {
		ref = "direct_master"
	}
	rep.result = result{metric: "gateway_get_per_s", value: gwRate, unit: "req/s", ref: ref, refValue: refRate}
	if haveNginx {
		ncmd.Process.Signal(syscall.SIGQUIT)
	}
	gcmd.Process.Signal(syscall.SIGTERM)
	return rep, nil
}

func gwShortName(s string) string {
	if i := strings.IndexByte(s, ','); i > 0 {
		return s[:i]
	}
	return s
}

// gwSetEnv sets variables for the processes started next and returns a
// function that puts the previous values back.
func gwSetEnv(vars map[string]string) func() {
	old := map[string]*string{}
	for k, v := range vars {
		if prev, ok := os.LookupEnv(k); ok {
			old[k] = &prev
		} else {
			old[k] = nil
		}
		os.Setenv(k, v)
	}
	return func() {
		for k, v := range old {
			if v == nil {
				os.Unsetenv(k)
			} else {
				os.Setenv(k, *v)
			}
		}
	}
}
