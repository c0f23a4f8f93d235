package webtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// server is a running `rlsched up`.
type server struct {
	t   *testing.T
	c   *rig.Cluster
	p   *rig.Proc
	url string
}

var urlLine = regexp.MustCompile(`(?m)^\s*URL:\s+(\S+)\s*$`)

// startUp runs `rlsched up` with free ports in a fresh directory and waits
// until it prints its URL and a local worker is up. gpus < 0 leaves the
// GPU count to detection. env adds to its environment, which logs
// warnings only.
func startUp(t *testing.T, gpus int, env ...string) *server {
	t.Helper()
	c := rig.New(t, "LOG_LEVEL=warn", "RLSCHED_CANCEL_GRACE_SECONDS=2")
	args := []string{"up", "--data-dir", filepath.Join(c.Dir, "data"), "--master-port", "0", "--rpc-port", "0", "--gateway-port", "0"}
	if gpus >= 0 {
		args = append(args, "--gpus", fmt.Sprint(gpus))
	}
	s := &server{t: t, c: c, p: c.Start("up", c.ServerEnv(env...), args...)}
	// Before the cluster's cleanup (SIGKILL of the group): up stops its
	// local worker and that worker's runs on SIGTERM.
	t.Cleanup(func() { _ = s.p.Cmd.Process.Signal(syscall.SIGTERM); s.p.WaitExit(10 * time.Second) })
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		out := s.p.Stdout()
		if m := urlLine.FindStringSubmatch(out); m != nil {
			s.url = m[1]
			return true, ""
		}
		if s.p.Exited() {
			t.Fatalf("rlsched up exited early; stderr:\n%s", s.p.Stderr())
		}
		return false, "rlsched up printed no URL: line; stdout:\n" + out
	})
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
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

var upLine = regexp.MustCompile(`(?m)^\s*(RPC|secrets):\s+(\S+)`)

// startWorker starts a worker of its own beside up's local one, the way
// up's banner says: at up's RPC address, with the join token of up's
// secrets file; gpus synthetic GPUs.
func (s *server) startWorker(id string, gpus int) *rig.Proc {
	s.t.Helper()
	got := map[string]string{}
	for _, m := range upLine.FindAllStringSubmatch(s.p.Stdout(), -1) {
		got[m[1]] = m[2]
	}
	secrets, err := os.ReadFile(got["secrets"])
	if err != nil || got["RPC"] == "" {
		s.t.Fatalf("up's RPC address %q and secrets %q: %v", got["RPC"], got["secrets"], err)
	}
	token := regexp.MustCompile(`(?m)^WORKER_JOIN_TOKEN=(\S+)`).FindSubmatch(secrets)
	if token == nil {
		s.t.Fatalf("no WORKER_JOIN_TOKEN in %s", got["secrets"])
	}
	return s.c.StartWorker(id, got["RPC"], rig.WorkerOpts{GPUs: gpus, Token: string(token[1])})
}

// api is a REST client of the server, signed in as one user.
type api struct{ *rig.Client }

func (s *server) api() *api { return &api{rig.NewClient(s.t, s.url)} }

// do sends a request (see rig.Do); it fails the test when no answer comes.
func (a *api) do(method, path string, body any) (int, []byte) {
	a.T.Helper()
	r, err := a.Do(method, path, body)
	if err != nil {
		a.T.Fatalf("%s %s: %v", method, path, err)
	}
	return r.Status, r.Body
}

// signup registers name and signs in as it.
func (a *api) signup(name string) *api {
	a.T.Helper()
	c, _ := a.Signup(name)
	return &api{c}
}

// login signs in as name.
func (a *api) login(name, pw string) *api {
	a.T.Helper()
	return &api{a.Login(name, pw)}
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
	ErrorTail     string   `json:"errorTail"`
}

func (a *api) submit(body map[string]any) string {
	a.T.Helper()
	st, b := a.do("POST", "/api/train", body)
	if st != 202 {
		a.T.Fatalf("submit %v: %d %s", body, st, b)
	}
	var r struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.ID == "" {
		a.T.Fatalf("submit: %s", b)
	}
	return r.ID
}

func (a *api) task(id string) task {
	a.T.Helper()
	st, b := a.do("GET", "/api/tasks/"+id, nil)
	if st != 200 {
		a.T.Fatalf("task %s: %d %s", id, st, b)
	}
	var t task
	if err := json.Unmarshal(b, &t); err != nil {
		a.T.Fatal(err)
	}
	return t
}

func (a *api) waitStatus(id, want string, timeout time.Duration) task {
	a.T.Helper()
	var t task
	testutil.Eventually(a.T, timeout, func() (bool, string) {
		t = a.task(id)
		return t.Status == want, fmt.Sprintf("run %s is %s, want %s", id, t.Status, want)
	})
	return t
}

// sweepDone posts the sweep body and waits until n of its members
// succeeded; it returns the sweep's id.
func (a *api) sweepDone(body map[string]any, n int, timeout time.Duration) string {
	a.T.Helper()
	st, b := a.do("POST", "/api/sweeps", body)
	if st != 202 {
		a.T.Fatalf("POST /api/sweeps: %d %s", st, b)
	}
	var sw struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &sw); err != nil {
		a.T.Fatal(err)
	}
	testutil.Eventually(a.T, timeout, func() (bool, string) {
		var v struct {
			Counts map[string]int `json:"counts"`
		}
		_, b := a.do("GET", "/api/sweeps/"+sw.ID+"?runs=false", nil)
		_ = json.Unmarshal(b, &v)
		return v.Counts["SUCCEEDED"] == n, fmt.Sprintf("sweep %v: counts %v", body["name"], v.Counts)
	})
	return sw.ID
}

func (a *api) cancel(id string) {
	a.T.Helper()
	a.do("POST", "/api/tasks/"+id+"/cancel", nil)
}
