package webtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/e2eutil"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

const password = "a-long-password"

// eventually is testutil.Eventually.
var eventually = testutil.Eventually

// server is a running `rlsched up`.
type server struct {
	t       *testing.T
	dir     string
	url     string
	cmd     *exec.Cmd
	outPath string
	errPath string
	done    chan struct{}
}

var urlLine = regexp.MustCompile(`(?m)^\s*URL:\s+(\S+)\s*$`)

// serverEnv is the test's environment minus every setting rlsched reads,
// logging warnings only (a later entry wins in exec).
func serverEnv(extra ...string) []string {
	return e2eutil.ServerEnv(nil, append([]string{"LOG_LEVEL=warn", "RLSCHED_CANCEL_GRACE_SECONDS=2"}, extra...)...)
}

// startUp runs `rlsched up` with free ports in a fresh directory and waits
// until it prints its URL and a local worker is up. gpus < 0 leaves the
// GPU count to detection. env adds to its environment.
func startUp(t *testing.T, gpus int, env ...string) *server {
	t.Helper()
	if rlschedBin == "" {
		t.Skip("browser tests need Linux and the rlsched binary")
	}
	// Runs under uids of their own (up run as root) must reach the local
	// worker's data dir in here.
	dir := testutil.ReachableTempDir(t)
	s := &server{t: t, dir: dir, outPath: filepath.Join(dir, "up.stdout"), errPath: filepath.Join(dir, "up.stderr"), done: make(chan struct{})}
	out, err := os.Create(s.outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	errf, err := os.Create(s.errPath)
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	args := []string{"up", "--data-dir", filepath.Join(dir, "data"), "--master-port", "0", "--rpc-port", "0", "--gateway-port", "0"}
	if gpus >= 0 {
		args = append(args, "--gpus", fmt.Sprint(gpus))
	}
	s.cmd = exec.Command(rlschedBin, args...)
	s.cmd.Env = serverEnv(env...)
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = out, errf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("cannot start rlsched up: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(s.stop)
	eventually(t, 30*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(s.outPath)
		if m := urlLine.FindSubmatch(b); m != nil {
			s.url = string(m[1])
			return true, ""
		}
		select {
		case <-s.done:
			t.Fatalf("rlsched up exited early; stderr:\n%s", s.stderr())
		default:
		}
		return false, "rlsched up printed no URL: line; stdout:\n" + string(b)
	})
	eventually(t, 30*time.Second, func() (bool, string) {
		var h struct {
			Workers map[string]int `json:"workers"`
		}
		r, err := http.Get(s.url + "/api/monitor/health")
		if err != nil {
			return false, err.Error()
		}
		defer r.Body.Close()
		_ = json.NewDecoder(r.Body).Decode(&h)
		return h.Workers["IDLE"]+h.Workers["RUNNING"] > 0, fmt.Sprintf("no live worker yet: %v", h.Workers)
	})
	return s
}

func (s *server) stderr() string {
	b, _ := os.ReadFile(s.errPath)
	return string(b)
}

// stop ends the server (SIGTERM, then SIGKILL of its group) and fails the
// test if it panicked or logged a BUG.
func (s *server) stop() {
	if st := s.stderr(); strings.Contains(st, "panic: ") || strings.Contains(st, `"message":"BUG:`) || strings.Contains(st, "fatal error: ") {
		s.t.Errorf("rlsched up crashed or logged a BUG:\n%s", tail(st, 60))
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.t.Errorf("rlsched up (pid %d) survived SIGKILL", s.cmd.Process.Pid)
	}
	if s.t.Failed() {
		s.t.Logf("---- rlsched up stderr, last lines:\n%s", tail(s.stderr(), 60))
	}
}

// tail is e2eutil.Tail.
var tail = e2eutil.Tail

// api is a REST client of the server, signed in as one user.
type api struct {
	t     testing.TB
	base  string
	token string
}

func (s *server) api() *api { return &api{t: s.t, base: s.url} }

func (a *api) do(method, path string, body any) (int, []byte) {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			a.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	hc := &http.Client{Timeout: 20 * time.Second}
	res, err := hc.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// signup registers name and signs in as it.
func (a *api) signup(name string) *api {
	a.t.Helper()
	if st, b := a.do("POST", "/api/auth/register", map[string]string{"username": name, "password": password}); st != 201 {
		a.t.Fatalf("register %s: %d %s", name, st, b)
	}
	return a.login(name, password)
}

// login signs in as name.
func (a *api) login(name, pw string) *api {
	a.t.Helper()
	st, b := a.do("POST", "/api/auth/login", map[string]string{"username": name, "password": pw})
	if st != 200 {
		a.t.Fatalf("login %s: %d %s", name, st, b)
	}
	var r struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Token == "" {
		a.t.Fatalf("login %s: %s", name, b)
	}
	return &api{t: a.t, base: a.base, token: r.Token}
}

// task is the part of API.md's Task the tests read.
type task struct {
	ID            string   `json:"id"`
	Name          string   `json:"name"`
	User          string   `json:"user"`
	Status        string   `json:"status"`
	Worker        string   `json:"worker"`
	GPUIndices    []int    `json:"gpuIndices"`
	FinalReward   *float64 `json:"finalReward"`
	QueuePosition int      `json:"queuePosition"`
	PendingReason string   `json:"pendingReason"`
}

func (a *api) submit(body map[string]any) string {
	a.t.Helper()
	st, b := a.do("POST", "/api/train", body)
	if st != 202 {
		a.t.Fatalf("submit %v: %d %s", body, st, b)
	}
	var r struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.ID == "" {
		a.t.Fatalf("submit: %s", b)
	}
	return r.ID
}

func (a *api) task(id string) task {
	a.t.Helper()
	st, b := a.do("GET", "/api/tasks/"+id, nil)
	if st != 200 {
		a.t.Fatalf("task %s: %d %s", id, st, b)
	}
	var t task
	if err := json.Unmarshal(b, &t); err != nil {
		a.t.Fatal(err)
	}
	return t
}

func (a *api) waitStatus(id, want string, timeout time.Duration) task {
	a.t.Helper()
	var t task
	eventually(a.t, timeout, func() (bool, string) {
		t = a.task(id)
		return t.Status == want, fmt.Sprintf("run %s is %s, want %s", id, t.Status, want)
	})
	return t
}

func (a *api) cancel(id string) {
	a.t.Helper()
	a.do("POST", "/api/tasks/"+id+"/cancel", nil)
}
