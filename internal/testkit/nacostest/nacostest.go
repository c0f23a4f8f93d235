// Package nacostest runs a real Nacos-protocol server for tests: Polaris
// v1.18.1 (Go), which serves the Nacos gRPC v2 and HTTP v1 protocols to the
// unchanged nacos-sdk-go/v2 client (../shared/nacos/README.md).
//
// The server is built from tools/nacos-server (a module of its own, so its
// large dependency tree stays out of the main go.mod) once, into
// $RLSCHED_CACHE_DIR or $HOME/.cache/rlsched, and rebuilt only when
// missing; $RLSCHED_POLARIS_BIN names a ready binary instead. A cold build
// takes minutes. When it cannot be built the test is skipped, or fails under
// CI=true, like internal/testkit/testsvc does for Redis.
package nacostest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/toolbin"
)

// Polaris is the Nacos-protocol server, built from tools/nacos-server and
// cached by internal/testkit/toolbin (RLSCHED_POLARIS_BIN names a ready binary).
var Polaris = &toolbin.Tool{
	Name:    "polaris-server",
	Module:  "tools/nacos-server",
	Package: "github.com/polarismesh/polaris",
	Env:     "RLSCHED_POLARIS_BIN",
	What:    "the Polaris (Nacos-protocol) server",
}

// Binary returns the path of the polaris-server binary, building it once.
func Binary(t testing.TB) string {
	t.Helper()
	return Polaris.Binary(t)
}

// Server is a running Polaris.
type Server struct {
	// Addr is the Nacos HTTP address, host:port (NACOS_ADDR); the gRPC port
	// is one thousand above.
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
	dir  string
}

// Start runs a server of its own for t on free ports, ready to serve; t's
// cleanup kills it.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	var lastErr error
	for try := 0; try < 5; try++ {
		s, err := start(bin, dir)
		if err == nil {
			t.Cleanup(func() {
				exited := s.exited()
				s.Stop()
				if t.Failed() || exited {
					t.Logf("nacostest: Polaris on %s (exited before the end: %v), its logs:\n%s", s.Addr, exited, s.logs())
				}
			})
			return s
		}
		lastErr = err
	}
	t.Fatalf("nacostest: cannot start Polaris: %v", lastErr)
	return nil
}

func start(bin, dir string) (*Server, error) {
	// Four listening ports: HTTP, gRPC, Nacos HTTP p and Nacos gRPC p+1000
	// (fixed by the protocol). They are taken below the ephemeral range, so
	// no connection another test opens meanwhile can land on one of them.
	ports, err := freeLowPorts(4)
	if err != nil {
		return nil, err
	}
	nacos := ports[2]
	cfg := strings.NewReplacer(
		"@HTTP@", fmt.Sprint(ports[0]), "@GRPC@", fmt.Sprint(ports[1]), "@NACOS@", fmt.Sprint(nacos),
	).Replace(configTemplate)
	run := filepath.Join(dir, fmt.Sprintf("run-%d", nacos))
	if err := os.MkdirAll(run, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(run, "polaris-server.yaml"), []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(run, "stdout.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	// Everything the server writes stays in run: its store and logs are
	// relative to it, and its config cache goes to os.TempDir(), which
	// TMPDIR points there too (the shared /tmp belongs to every test).
	tmp := filepath.Join(run, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "start", "-c", "polaris-server.yaml")
	cmd.Dir = run
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", nacos), cmd: cmd, done: make(chan struct{}), dir: run}
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-s.done:
			out, _ := os.ReadFile(filepath.Join(run, "stdout.log"))
			return nil, fmt.Errorf("polaris-server exited at start:\n%s", tail(string(out), 30))
		default:
		}
		if ready(client, s.Addr, nacos+1000) {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("polaris-server not ready on %s within 30 s", s.Addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ready: the Nacos HTTP API answers 200 and its gRPC port accepts.
func ready(client *http.Client, addr string, grpcPort int) bool {
	resp, err := client.Get("http://" + addr + "/nacos/v1/ns/operator/metrics")
	if err != nil {
		return false
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", grpcPort), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func (s *Server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// logs returns the tails of the server's output and log files.
func (s *Server) logs() string {
	var b strings.Builder
	for _, f := range []string{"stdout.log", "log/polaris-default.log", "log/polaris-default-error.log", "log/nacos-apiserver.log", "log/nacos-apiserver-error.log"} {
		data, err := os.ReadFile(filepath.Join(s.dir, f))
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", f, tail(string(data), 25))
	}
	return b.String()
}

// Stop kills the server and waits for it.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
}

// freeLowPorts returns up to four ports below the ephemeral range that
// accept a listener now: HTTP, gRPC, Nacos p, and p+1000.
func freeLowPorts(n int) ([]int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				low = v
			}
		}
	}
	lo, hi := 10000, low-1001
	if hi-lo < 1000 {
		return nil, fmt.Errorf("no room below the ephemeral range (it starts at %d)", low)
	}
	free := func(p int) bool {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		l.Close()
		return true
	}
	for try := 0; try < 200; try++ {
		base := lo + rand.IntN(hi-lo)
		ports := []int{base + 1, base + 2, base, base + 1000}
		ok := true
		for _, p := range ports {
			if !free(p) {
				ok = false
				break
			}
		}
		if ok {
			return ports[:n], nil
		}
	}
	return nil, fmt.Errorf("no free ports below %d", low)
}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// configTemplate is ../shared/nacos/polaris-server.yaml with the ports as
// placeholders. The naming.batch.* and healthcheck.batch.heartbeat sections
// must stay, or the server panics at start.
const configTemplate = `bootstrap:
  logger:
    default:
      rotateOutputPath: log/polaris-default.log
      errorRotateOutputPath: log/polaris-default-error.log
      outputLevel: info
    nacos-apiserver:
      rotateOutputPath: log/nacos-apiserver.log
      errorRotateOutputPath: log/nacos-apiserver-error.log
      outputLevel: info
  startInOrder:
    open: true
    key: sz
  polaris_service:
    enable_register: true
    isolated: false
    services:
      - name: polaris.checker
        protocols:
          - service-grpc
apiservers:
  - name: api-http
    option:
      listenIP: "127.0.0.1"
      listenPort: @HTTP@
      enablePprof: false
      enableSwagger: false
    api:
      admin:
        enable: true
      console:
        enable: true
        include: [default, service, config]
      client:
        enable: true
        include: [discover, register, healthcheck, config]
  - name: service-grpc
    option:
      listenIP: "127.0.0.1"
      listenPort: @GRPC@
      enableCacheProto: true
      sizeCacheProto: 128
    api:
      client:
        enable: true
        include: [discover, register, healthcheck]
  - name: service-nacos
    option:
      listenIP: "127.0.0.1"
      listenPort: @NACOS@
      defaultNamespace: default
auth:
  user:
    name: defaultUser
    option:
      salt: polarismesh@2021
  strategy:
    name: defaultStrategy
    option:
      consoleOpen: false
      consoleStrict: false
      clientOpen: false
      clientStrict: false
namespace:
  autoCreate: true
naming:
  autoCreate: true
  batch:
    register:
      open: true
      queueSize: 10240
      waitTime: 32ms
      maxBatchCount: 128
      concurrency: 128
      dropExpireTask: true
      taskLife: 30s
    deregister:
      open: true
      queueSize: 10240
      waitTime: 32ms
      maxBatchCount: 128
      concurrency: 128
healthcheck:
  open: true
  service: polaris.checker
  slotNum: 30
  minCheckInterval: 1s
  maxCheckInterval: 30s
  clientReportInterval: 120s
  batch:
    heartbeat:
      open: true
      queueSize: 10240
      waitTime: 32ms
      maxBatchCount: 32
      concurrency: 64
  checkers:
    - name: heartbeatMemory
config:
  open: true
  contentMaxLength: 20000
cache:
  diffTime: 5s
store:
  name: boltdbStore
  option:
    path: ./polaris.bolt
plugin:
  crypto:
    entries:
      - name: AES
  history:
    entries:
      - name: HistoryLogger
  discoverEvent:
    entries:
      - name: discoverEventLocal
  statis:
    entries:
      - name: local
        option:
          interval: 60
`
