package worker

import (
	"context"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rs/zerolog"
)

const testToken = "worker-test-join-token"

// Environment of a worker run in a child process by TestOrphanedRunsDie.
const (
	envTestMaster = "RLSCHED_TEST_WORKER_MASTER"
	envTestDir    = "RLSCHED_TEST_WORKER_DIR"
)

func TestMain(m *testing.M) {
	MaybeGuard() // the test binary is also the workers' guard
	zerolog.TimeFieldFormat = time.RFC3339Nano
	if addr := os.Getenv(envTestMaster); addr != "" {
		os.Exit(runChildWorker(addr, os.Getenv(envTestDir)))
	}
	// Runs under uids of their own get the PATH they can reach.
	os.Setenv("PATH", testutil.RunsPATH(os.Getenv("PATH")))
	if _, ok := os.LookupEnv("GORACE"); !ok {
		// Guards are this binary too; under -race each would sleep 1s on exit.
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	os.Exit(m.Run())
}

// runChildWorker runs a worker in this process until SIGTERM (or SIGKILL).
func runChildWorker(addr, dir string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err := Run(ctx, Config{
		ID: "child", Masters: []string{addr}, JoinToken: testToken, DataDir: dir, Grace: time.Second,
		Logger: zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).With().Timestamp().Logger(),
	})
	if err != nil {
		return 1
	}
	return 0
}

// testLog sends the worker's log to t.Log until the test ends.
type testLog struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testLog) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// startWorker runs a worker against m (nil: edit names the masters) until
// the test ends.
func startWorker(t *testing.T, m *fakeMaster, edit func(*Config)) Config {
	t.Helper()
	lw := &testLog{t: t}
	var masters []string
	if m != nil {
		masters = []string{m.addr()}
	}
	cfg := Config{
		ID:                "w1",
		Masters:           masters,
		JoinToken:         testToken,
		DataDir:           testutil.ReachableTempDir(t),
		GPUs:              SyntheticGPUs(2),
		HeartbeatInterval: 100 * time.Millisecond,
		Grace:             500 * time.Millisecond,
		Logger:            newTestLogger(lw),
	}
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		defer lw.stop()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30s of cancellation")
		}
	})
	return cfg
}

// waitFor is testutil.WaitFor.
var waitFor = testutil.WaitFor

func newTestLogger(lw *testLog) zerolog.Logger {
	return zerolog.New(zerolog.ConsoleWriter{Out: lw, NoColor: true, TimeFormat: "15:04:05.000"}).With().Timestamp().Logger()
}
