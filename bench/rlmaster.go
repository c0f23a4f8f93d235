package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The secrets of every master the harness starts; nothing outside the
// harness ever sees them.
const (
	benchJWTSecret = "bench-jwt-secret-0123456789abcdef"
	benchJoinToken = "bench-join-token"
	benchUser      = "benchuser"
	benchPassword  = "bench-password-1"
)

// masterConf is how a scenario wants its master.
type masterConf struct {
	name     string // for log files
	dataDir  string
	hbTTL    int // WORKER_HB_TTL_SECONDS; workers beat every third of it
	taskTTL  int // WORKER_TASK_TTL_SECONDS
	restPort int // 0: pick a free one
	rpcPort  int
	env      []string // more of the master's environment, KEY=VALUE
}

// rlMaster is a running `rlsched master` process.
type rlMaster struct {
	e       *env
	conf    masterConf
	cmd     *exec.Cmd
	url     string
	rpc     string
	logPath string
	exited  chan struct{}
	waitErr error
	token   string
	profN   int // profiles taken, as the master's hook counts them
}

func (e *env) startMaster(c masterConf) (*rlMaster, error) {
	bin, err := e.rlschedBin()
	if err != nil {
		return nil, err
	}
	if c.hbTTL == 0 {
		c.hbTTL = 30
	}
	if c.taskTTL == 0 {
		c.taskTTL = 120
	}
	for _, p := range []*int{&c.restPort, &c.rpcPort} {
		if *p == 0 {
			if *p, err = freePort(); err != nil {
				return nil, err
			}
		}
	}
	m := &rlMaster{e: e, conf: c, url: fmt.Sprintf("http://127.0.0.1:%d", c.restPort),
		rpc: fmt.Sprintf("127.0.0.1:%d", c.rpcPort), exited: make(chan struct{})}
	m.logPath = filepath.Join(e.tmp, fmt.Sprintf("master-%s-%d.log", c.name, time.Now().UnixNano()))
	logf, err := os.Create(m.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	m.cmd = exec.Command(bin, "master", "--data-dir", c.dataDir, "--bind", "127.0.0.1",
		"--master-port", strconv.Itoa(c.restPort), "--rpc-port", strconv.Itoa(c.rpcPort), "--master-id", "bench-"+c.name)
	m.cmd.Env = append(os.Environ(),
		"JWT_SECRET="+benchJWTSecret, "WORKER_JOIN_TOKEN="+benchJoinToken,
		"WORKER_HB_TTL_SECONDS="+strconv.Itoa(c.hbTTL), "WORKER_TASK_TTL_SECONDS="+strconv.Itoa(c.taskTTL),
		// The bench user registers itself (a standalone master is closed),
		// and queues more runs, faster, than a user's default cap and
		// submission limit allow: the scenarios measure the queue, not them.
		"LOG_FORMAT=json", "REGISTRATION=open", "MAX_QUEUED_PER_USER=0", "RATE_LIMIT_ENABLED=false")
	m.cmd.Env = append(m.cmd.Env, c.env...)
	if e.profDir != "" {
		m.cmd.Env = append(m.cmd.Env, "RLSCHED_BENCH_PROFILE_DIR="+e.profDir)
	}
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	if err := e.start(m.cmd); err != nil {
		return nil, fmt.Errorf("cannot start rlsched master: %w", err)
	}
	go func() { m.waitErr = m.cmd.Wait(); close(m.exited) }()
	if err := m.waitReady(30 * time.Second); err != nil {
		m.kill()
		return nil, err
	}
	return m, nil
}

func (m *rlMaster) pid() int { return m.cmd.Process.Pid }

// waitReady polls the health endpoint and the RPC port.
func (m *rlMaster) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-m.exited:
			b, _ := os.ReadFile(m.logPath)
			return fmt.Errorf("rlsched master exited at start (%v):\n%s", m.waitErr, lastLines(b, 8))
		default:
		}
		resp, err := http.Get(m.url + "/api/monitor/health")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if c, err := net.DialTimeout("tcp", m.rpc, time.Second); err == nil && resp.StatusCode == http.StatusOK {
				c.Close()
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("rlsched master did not become ready within " + timeout.String())
}

// stop sends SIGTERM and waits for a clean exit (SIGKILL after 30 s).
func (m *rlMaster) stop() error {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
		return nil
	case <-time.After(30 * time.Second):
		m.kill()
		return errors.New("rlsched master did not stop within 30 s of SIGTERM")
	}
}

func (m *rlMaster) kill() {
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.exited
}

// mem returns VmRSS and VmHWM.
func (m *rlMaster) mem() (int64, int64) {
	rss, hwm, _ := procMem(m.pid())
	return rss, hwm
}

// postAs POSTs body as JSON to path with tok's bearer and returns the
// answer's body; a status other than want (any of them) is an error naming
// the path and the master's words.
func (m *rlMaster) postAs(tok, path string, body any, want ...int) ([]byte, error) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, m.url+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if !slices.Contains(want, resp.StatusCode) {
		return nil, fmt.Errorf("POST %s: HTTP %d %s", path, resp.StatusCode, bytes.TrimSpace(out))
	}
	return out, nil
}

// login registers the bench user (the first user of a fresh store) when
// needed, logs in, and keeps the token.
func (m *rlMaster) login() (string, error) {
	if m.token != "" {
		return m.token, nil
	}
	creds := fmt.Sprintf(`{"username":%q,"password":%q}`, benchUser, benchPassword)
	resp, err := http.Post(m.url+"/api/auth/register", "application/json", strings.NewReader(creds))
	if err != nil {
		return "", fmt.Errorf("cannot register the bench user: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusConflict {
		return "", fmt.Errorf("cannot register the bench user: HTTP %d", resp.StatusCode)
	}
	resp, err = http.Post(m.url+"/api/auth/login", "application/json", strings.NewReader(creds))
	if err != nil {
		return "", fmt.Errorf("cannot log in: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Token == "" {
		return "", fmt.Errorf("cannot log in: HTTP %d %v", resp.StatusCode, err)
	}
	m.token = out.Token
	return m.token, nil
}

// get calls a REST endpoint with the bench user's token and decodes JSON.
func (m *rlMaster) get(path string, v any) error {
	tok, err := m.login()
	if err != nil {
		return err
	}
	req, _ := http.NewRequest(http.MethodGet, m.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d %s", path, resp.StatusCode, bytes.TrimSpace(b))
	}
	return json.Unmarshal(b, v)
}

// profile toggles the master's CPU profile (only with -profile): the first
// call starts it, the second stops it and writes heap and allocation
// profiles; files are renamed to label.
func (m *rlMaster) profile(label string, start bool) {
	if m.e.profDir == "" {
		return
	}
	if start {
		m.profN++
	}
	m.e.profileProc(m.cmd.Process, m.profN, label, start)
}

// profileProc starts (start) or stops the n-th profile of a process built
// with bench/overlay and started with RLSCHED_BENCH_PROFILE_DIR, and names
// its files after label.
func (e *env) profileProc(p *os.Process, n int, label string, start bool) {
	if start {
		_ = p.Signal(syscall.SIGUSR1)
		time.Sleep(50 * time.Millisecond)
		return
	}
	_ = p.Signal(syscall.SIGUSR2)
	done := filepath.Join(e.profDir, fmt.Sprintf("done-%d-%d", p.Pid, n))
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(done); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, kind := range []string{"cpu", "heap", "allocs", "goroutine"} {
		src := filepath.Join(e.profDir, fmt.Sprintf("%s-%d-%d.pprof", kind, p.Pid, n))
		_ = os.Rename(src, filepath.Join(e.profDir, label+"."+kind+".pprof"))
	}
	_ = os.Remove(done)
	e.logf("profile %s written to %s", label, e.profDir)
}
