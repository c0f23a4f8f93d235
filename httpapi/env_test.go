package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/sqlite"
)

var testSecret = []byte("test-secret-0123456789abcdef")

var testTrainer = []string{"python3", "-u", "@scripts/train.py"}

// testControl stands in for the dispatcher: it records calls, and Cancel
// moves a run to CANCELLED in the store the way the dispatcher would.
type testControl struct {
	st store.Store

	mu          sync.Mutex
	notified    int
	cancels     []string
	workers     []core.WorkerInfo
	panicOnList bool
}

func (c *testControl) Notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notified++
}

func (c *testControl) Queued(core.Task) { c.Notify() }

func (c *testControl) Cancel(ctx context.Context, id string) (core.Task, error) {
	c.mu.Lock()
	c.cancels = append(c.cancels, id)
	c.mu.Unlock()
	t, err := c.st.Task(ctx, id)
	if err != nil {
		return core.Task{}, err
	}
	if t.Status.Terminal() {
		return core.Task{}, core.ErrConflict
	}
	exp := store.Expect{Fence: t.Fence, Status: t.Status}
	now := time.Now()
	t.Status, t.FinishedAt = core.StatusCancelled, &now
	if err := c.st.UpdateTask(ctx, &t, exp); err != nil {
		return core.Task{}, err
	}
	return t, nil
}

func (c *testControl) Workers() []core.WorkerInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.panicOnList {
		panic("test: workers exploded")
	}
	return append([]core.WorkerInfo(nil), c.workers...)
}

func (c *testControl) MasterID() string { return "master-test" }

// DrainWorker and ForgetWorker act on the listed workers as the
// dispatcher does on its registry.
func (c *testControl) DrainWorker(id string, drain bool) (core.WorkerInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, w := range c.workers {
		if w.ID == id {
			if drain && w.State != core.WorkerDown && w.State != core.WorkerPending {
				c.workers[i].State = core.WorkerDraining
			} else if !drain && w.State == core.WorkerDraining {
				c.workers[i].State = core.WorkerIdle
			}
			return c.workers[i], nil
		}
	}
	return core.WorkerInfo{}, core.ErrNotFound
}

func (c *testControl) ForgetWorker(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, w := range c.workers {
		if w.ID == id {
			if w.State != core.WorkerDown {
				return core.ErrConflict
			}
			c.workers = append(c.workers[:i], c.workers[i+1:]...)
			return nil
		}
	}
	return core.ErrNotFound
}

func (c *testControl) calls() (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.notified, append([]string(nil), c.cancels...)
}

// testClock is the server's clock, moved by tests instead of sleeping.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type testEnv struct {
	t      *testing.T
	url    string
	addr   string
	st     store.Store
	ctl    *testControl
	clock  *testClock
	logDir string
	logs   *testutil.SyncBuffer
	client *http.Client
	srv    *Server // for what the master's own loops call (AddMembers)
}

func newEnv(t *testing.T) *testEnv {
	t.Helper()
	return newEnvWith(t, nil)
}

// newEnvWith is newEnv with the Config changed by edit (when not nil).
func newEnvWith(t *testing.T, edit func(*Config)) *testEnv {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "rlsched.db"))
	if err != nil {
		t.Fatalf("cannot open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := &testEnv{
		t:      t,
		st:     st,
		ctl:    &testControl{st: st},
		clock:  &testClock{now: time.Now()},
		logDir: filepath.Join(dir, "logs"),
		logs:   &testutil.SyncBuffer{},
		client: &http.Client{Timeout: 30 * time.Second},
	}
	cfg := Config{
		JWTSecret:      testSecret,
		LogDir:         e.logDir,
		DefaultTrainer: testTrainer,
		LeasesKind:     "memory",
		BcryptCost:     bcrypt.MinCost,
		Logger:         zerolog.New(e.logs),
		Now:            e.clock.Now,
	}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := New(cfg, st, e.ctl)
	if err != nil {
		t.Fatalf("cannot create server: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("cannot listen: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		e.client.CloseIdleConnections()
		if err := srv.Shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	e.srv = srv
	e.addr = ln.Addr().String()
	e.url = "http://" + e.addr
	return e
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body into a generic map.
func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %q", err, r.body)
	}
	return m
}

// errCode returns the error code of an error answer, checking its shape.
func (r resp) errCode(t *testing.T) string {
	t.Helper()
	var b struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			TraceID string `json:"traceId"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil {
		t.Fatalf("error body is not JSON: %v: %q", err, r.body)
	}
	if b.Error.Code == "" || b.Error.Message == "" {
		t.Fatalf("error body lacks code or message: %s", r.body)
	}
	if b.Error.TraceID == "" || b.Error.TraceID != r.header.Get("X-Trace-Id") {
		t.Fatalf("error traceId %q differs from X-Trace-Id %q", b.Error.TraceID, r.header.Get("X-Trace-Id"))
	}
	return b.Error.Code
}

// req sends a request; body is sent as is when a string or []byte, else as
// JSON; hdr pairs are extra headers; token, when set, goes as a Bearer.
func (e *testEnv) req(method, path, token string, body any, hdr ...string) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatalf("cannot encode body: %v", err)
		}
		rd = bytes.NewReader(j)
	}
	rq, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatalf("cannot build request %s %s: %v", method, path, err)
	}
	if token != "" {
		rq.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			rq.Host = hdr[i+1]
			continue
		}
		rq.Header.Set(hdr[i], hdr[i+1])
	}
	rs, err := e.client.Do(rq)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer rs.Body.Close()
	b, err := io.ReadAll(rs.Body)
	if err != nil {
		e.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	if rs.StatusCode >= 500 && rs.StatusCode != http.StatusServiceUnavailable {
		e.t.Errorf("%s %s answered %d: %s", method, path, rs.StatusCode, b)
	}
	if !core.ValidTraceID(rs.Header.Get("X-Trace-Id")) {
		e.t.Errorf("%s %s: bad X-Trace-Id %q", method, path, rs.Header.Get("X-Trace-Id"))
	}
	return resp{rs.StatusCode, rs.Header, b}
}

// user registers name and logs in, returning its token and id.
func (e *testEnv) user(name string) (string, int64) {
	e.t.Helper()
	r := e.req("POST", "/api/auth/register", "", map[string]string{"username": name, "password": "password-" + name})
	if r.status != http.StatusCreated {
		e.t.Fatalf("register %s: %d %s", name, r.status, r.body)
	}
	return e.login(name, "password-"+name)
}

func (e *testEnv) login(name, password string) (string, int64) {
	e.t.Helper()
	r := e.req("POST", "/api/auth/login", "", map[string]string{"username": name, "password": password})
	if r.status != http.StatusOK {
		e.t.Fatalf("login %s: %d %s", name, r.status, r.body)
	}
	var b struct {
		Token string `json:"token"`
		User  struct {
			ID int64 `json:"id"`
		} `json:"user"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil || b.Token == "" {
		e.t.Fatalf("login %s: bad body %s", name, r.body)
	}
	return b.Token, b.User.ID
}

// submit posts a run and returns its id.
func (e *testEnv) submit(token string, body any) string {
	e.t.Helper()
	r := e.req("POST", "/api/train", token, body)
	if r.status != http.StatusAccepted {
		e.t.Fatalf("submit %v: %d %s", body, r.status, r.body)
	}
	m := r.json(e.t)
	id, _ := m["id"].(string)
	if !core.ValidTaskID(id) || m["status"] != "QUEUED" || m["traceId"] != r.header.Get("X-Trace-Id") {
		e.t.Fatalf("submit: bad answer %s", r.body)
	}
	return id
}

// task reads a run straight from the store.
func (e *testEnv) task(id string) core.Task {
	e.t.Helper()
	t, err := e.st.Task(context.Background(), id)
	if err != nil {
		e.t.Fatalf("store: task %s: %v", id, err)
	}
	return t
}

// finish moves a QUEUED run to st in the store.
func (e *testEnv) finish(id string, st core.Status) {
	e.t.Helper()
	t := e.task(id)
	exp := store.Expect{Fence: t.Fence, Status: t.Status}
	now := time.Now()
	t.Status, t.FinishedAt = st, &now
	if err := e.st.UpdateTask(context.Background(), &t, exp); err != nil {
		e.t.Fatalf("store: finish %s: %v", id, err)
	}
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("cannot decode %q: %v", b, err)
	}
}

func sprint(v any) string { return fmt.Sprint(v) }
