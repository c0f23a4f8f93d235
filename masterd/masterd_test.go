package masterd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/internal/rediskey"
	"github.com/rlsched/rlsched/internal/testkit/testsvc"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/worker"
)

func TestMain(m *testing.M) {
	// The test's worker guards its runs with this binary started again.
	worker.MaybeGuard()
	// Runs under uids of their own get the PATH they can reach.
	os.Setenv("PATH", testutil.RunsPATH(os.Getenv("PATH")))
	if _, ok := os.LookupEnv("GORACE"); !ok {
		os.Setenv("GORACE", "atexit_sleep_ms=0") // guards are this binary too
	}
	os.Exit(m.Run())
}

const joinToken = "masterd-test-join-token"

// start starts a master from cfg (completed for a test: free ports, a data
// dir, secrets) and stops it at the end of the test.
func start(t *testing.T, cfg Config) *Master {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	cfg.DataDir, cfg.Bind = t.TempDir(), "127.0.0.1"
	cfg.JWTSecret, cfg.JoinToken = "masterd-test-jwt-secret-0123456789", joinToken
	cfg.Logger = zerolog.New(logs)
	m, err := Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close(context.Background())
		if t.Failed() {
			t.Logf("master log:\n%s", logs.String())
		}
	})
	return m
}

// join starts a worker on m, stopped at the end of the test.
func join(t *testing.T, m *Master, id string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(ctx, worker.Config{ID: id, Masters: []string{m.RPCAddr()}, JoinToken: joinToken,
			DataDir: testutil.ReachableTempDir(t), Slots: 1, Grace: time.Second})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the worker did not stop within 30 s")
		}
	})
}

// call sends a JSON request and decodes the answer into out (when not nil),
// failing unless the status is want.
func call(t *testing.T, m *Master, method, path, token string, body, out any, want int) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, m.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	_, _ = raw.ReadFrom(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, raw.String(), want)
	}
	if out != nil {
		if err := json.Unmarshal(raw.Bytes(), out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, raw.String())
		}
	}
}

type health struct {
	Status  string         `json:"status"`
	Master  string         `json:"master"`
	Store   string         `json:"store"`
	Leases  string         `json:"leases"`
	Workers map[string]int `json:"workers"`
}

// exercise checks what a master started from a Config must do: answer its
// health check, take a worker, and run a run to its end with the run's
// metrics stored before the end (the store decorators in their order).
func exercise(t *testing.T, m *Master, leases string) {
	var h health
	call(t, m, "GET", "/api/monitor/health", "", nil, &h, 200)
	if h.Status != "UP" || h.Master != m.MasterID() || h.Store != "sqlite" || h.Leases != leases {
		t.Fatalf("health %+v", h)
	}
	join(t, m, "w1")
	testutil.WaitFor(t, time.Minute, "the worker joined", func() bool {
		call(t, m, "GET", "/api/monitor/health", "", nil, &h, 200)
		return h.Workers["IDLE"] == 1
	})
	call(t, m, "POST", "/api/auth/register", "", map[string]string{"username": "alice", "password": "a-long-password"}, nil, 201)
	var login struct {
		Token string `json:"token"`
	}
	call(t, m, "POST", "/api/auth/login", "", map[string]string{"username": "alice", "password": "a-long-password"}, &login, 200)
	var sub struct {
		ID string `json:"id"`
	}
	call(t, m, "POST", "/api/train", login.Token, map[string]any{
		"command": []string{"printf", `RLSCHED_METRIC {"step": 1, "reward": 2.5}\nFINAL_REWARD: 3\n`}}, &sub, 202)
	var run struct {
		Status      string   `json:"status"`
		FinalReward *float64 `json:"finalReward"`
	}
	testutil.WaitFor(t, time.Minute, "the run ended", func() bool {
		call(t, m, "GET", "/api/tasks/"+sub.ID, login.Token, nil, &run, 200)
		return run.Status != "QUEUED" && run.Status != "DISPATCHED" && run.Status != "RUNNING"
	})
	if run.Status != "SUCCEEDED" || run.FinalReward == nil || *run.FinalReward != 3 {
		t.Fatalf("run ended %s with final reward %v; want SUCCEEDED and 3", run.Status, run.FinalReward)
	}
	var ms struct {
		Series map[string][][2]float64 `json:"series"`
	}
	call(t, m, "GET", "/api/tasks/"+sub.ID+"/metrics", login.Token, nil, &ms, 200)
	if got := fmt.Sprint(ms.Series["reward"]); got != "[[1 2.5]]" {
		t.Fatalf("metrics at the run's end: %s, want [[1 2.5]]", got)
	}
	log, err := os.ReadFile(filepath.Join(m.LogDir(), sub.ID+".log"))
	if err != nil || !strings.Contains(string(log), "FINAL_REWARD: 3\n") {
		t.Fatalf("run log %q, %v", log, err)
	}
}

// TestStart_Embedded: SQLite and in-memory leases, one master alone.
func TestStart_Embedded(t *testing.T) {
	m := start(t, Config{})
	exercise(t, m, "memory")
}

// TestStart_Redis: leases in Redis and a cluster member (alone in its
// prefix).
func TestStart_Redis(t *testing.T) {
	addr := testsvc.RequireRedis(t)
	prefix := fmt.Sprintf("masterd-test-%d", time.Now().UnixNano())
	t.Cleanup(func() { deleteKeys(t, addr, prefix) })
	m := start(t, Config{RedisAddr: addr, RedisPrefix: prefix})
	exercise(t, m, "redis")
}

// TestStart_Refuses: a master without its secrets does not start, and says
// what to set.
func TestStart_Refuses(t *testing.T) {
	f := func(cfg Config, want string) {
		t.Helper()
		cfg.DataDir = t.TempDir()
		if _, err := Start(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Start: %v, want an error naming %s", err, want)
		}
	}
	f(Config{JoinToken: joinToken}, "JWT_SECRET")
	f(Config{JWTSecret: "short", JoinToken: joinToken}, "JWT_SECRET is too short")
	f(Config{JWTSecret: "masterd-test-jwt-secret-0123456789"}, "WORKER_JOIN_TOKEN")
	f(Config{JWTSecret: "masterd-test-jwt-secret-0123456789", JoinToken: "s3cret"}, "WORKER_JOIN_TOKEN: the join token is 6 bytes long, shorter than 16")
	f(Config{JWTSecret: "masterd-test-jwt-secret-0123456789", JoinToken: joinToken, WorkerIDs: []string{"w1", "../x"}}, `WORKER_IDS: "../x" is not a worker id`)
	f(Config{JWTSecret: "masterd-test-jwt-secret-0123456789", JoinToken: joinToken, RedisAddr: "127.0.0.1:1", RedisPrefix: "bad prefix"}, "REDIS_PREFIX")
}

// deleteKeys removes the test's keys from the shared Redis.
func deleteKeys(t *testing.T, addr, prefix string) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Errorf("cannot clean up redis: %v", err)
		return
	}
	defer c.Close()
	ctx := context.Background()
	for cursor := uint64(0); ; {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(rediskey.Pattern(prefix)).Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Errorf("cannot clean up redis: %v", err)
			return
		}
		for _, k := range e.Elements {
			_ = c.Do(ctx, c.B().Del().Key(k).Build()).Error()
		}
		if cursor = e.Cursor; cursor == 0 {
			return
		}
	}
}
