package worker

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

func TestDataDir_OneHolderAndAStableIdentity(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "dir")
	d, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.instance) != 2*instanceLen || len(d.suffix) != 2*suffixLen {
		t.Fatalf("instance %q, suffix %q", d.instance, d.suffix)
	}
	// The pid in the file may be stale (a previous holder's): the kernel's
	// record of the lock names the holder.
	if err := os.WriteFile(filepath.Join(dir, lockFile), []byte("999999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = lockDataDir(dir)
	if err == nil {
		t.Fatal("a second lock of a held data dir succeeded")
	}
	for _, want := range []string{dir, "in use", "pid " + strconv.Itoa(os.Getpid()), "--data-dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	d.close()
	again, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	defer again.close()
	if again.instance != d.instance || again.suffix != d.suffix {
		t.Fatalf("identity changed across restarts: %q/%q, then %q/%q", d.instance, d.suffix, again.instance, again.suffix)
	}
	other, err := lockDataDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer other.close()
	if other.instance == d.instance || other.suffix == d.suffix {
		t.Fatalf("two data dirs share an identity: %q/%q", other.instance, other.suffix)
	}
}

func TestDataDir_CorruptIdentityRefused(t *testing.T) {
	f := func(name, content string) {
		t.Helper()
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := lockDataDir(dir)
		if err == nil {
			d.close()
			t.Fatalf("%s = %q accepted", name, content)
		}
		if !strings.Contains(err.Error(), filepath.Join(dir, name)) || !strings.Contains(err.Error(), "delete the file") {
			t.Errorf("%s = %q: %v; want the path and what to do", name, content, err)
		}
		// Refused, not repaired: the file is as it was.
		if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != content {
			t.Errorf("%s rewritten to %q", name, b)
		}
		// And the lock was released: a fixed dir can be used at once.
		os.Remove(filepath.Join(dir, name))
		d, err = lockDataDir(dir)
		if err != nil {
			t.Fatalf("after removing %s: %v", name, err)
		}
		d.close()
	}
	f(instanceFile, "")
	f(instanceFile, "not hex at all, not hex at all..")
	f(instanceFile, "abcd\n")
	f(suffixFile, "3f9a2c3f")
	f(suffixFile, "zzzzzz")
}

func TestDefaultID(t *testing.T) {
	f := func(host, want string) {
		t.Helper()
		got := defaultID(host, "3f9a2c")
		if got != want {
			t.Errorf("defaultID(%q) = %q, want %q", host, got, want)
		}
		if !core.ValidWorkerID(got) {
			t.Errorf("defaultID(%q) = %q is not a valid worker id", host, got)
		}
	}
	f("myhost", "myhost-3f9a2c")
	f("gpu1.lab.example.org", "gpu1-lab-example-org-3f9a2c")
	f("", "worker-3f9a2c")
	f("...", "worker-3f9a2c")
	f("ünï", "n-3f9a2c")
	f(strings.Repeat("h", 80), strings.Repeat("h", 57)+"-3f9a2c")
}

// TestRun_SecondWorkerOnADataDirExits: a second worker on a dir in use
// fails at once, names --data-dir, and leaves the first worker's files and
// run alone.
func TestRun_SecondWorkerOnADataDirExits(t *testing.T) {
	m := newFakeMaster(t, testToken)
	cfg := startWorker(t, m, func(c *Config) { c.ID = "" })
	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-first", Attempt: 1,
		Argv: []string{"sh", "-c", "echo one; exec sleep 600"}})
	pgid := int(mc.started(t, "t-first").GetPid())
	waitFor(t, 10*time.Second, "the first line", func() bool { return m.log("t-first", 1) == "one\n" })
	spool := filepath.Join(cfg.DataDir, "spool", "sentinel")
	if err := os.MkdirAll(filepath.Dir(spool), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spool, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	second := cfg
	second.Logger = newTestLogger(&testLog{t: t})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := Run(ctx, second)
	if ctx.Err() != nil {
		t.Fatal("the second worker did not exit at once")
	}
	if err == nil || !strings.Contains(err.Error(), "--data-dir") || !strings.Contains(err.Error(), cfg.DataDir) {
		t.Fatalf("second worker: %v; want a refusal naming --data-dir and %s", err, cfg.DataDir)
	}
	if _, err := os.Stat(spool); err != nil {
		t.Fatalf("the second worker touched the first one's spool: %v", err)
	}
	select {
	case mc2 := <-m.conns:
		t.Fatalf("the second worker joined the master as %q", mc2.hello.GetWorkerId())
	default:
	}
	if testutil.GroupGone(pgid) {
		t.Fatal("the first worker's run died")
	}
	mc.expectNone(t, 300*time.Millisecond, "a report of the first worker's run", isFinished("t-first"))
}

// TestHello_IdentityFromTheDataDir: without an id a worker is host-suffix,
// the same after a restart on its dir; its Hello carries the dir's instance
// token and its send time.
func TestHello_IdentityFromTheDataDir(t *testing.T) {
	dir := testutil.ReachableTempDir(t)
	hello := func(dataDir string) *pb.Hello {
		t.Helper()
		m := newFakeMaster(t, testToken)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		lw := &testLog{t: t}
		defer lw.stop()
		go func() {
			done <- Run(ctx, Config{Masters: []string{m.addr()}, JoinToken: testToken, Host: "gpu1.lab",
				DataDir: dataDir, Logger: newTestLogger(lw)})
		}()
		before := time.Now()
		h := m.next(t).hello
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if sent := time.UnixMilli(h.GetSentUnixMs()); sent.Before(before.Add(-time.Second)) || sent.After(time.Now().Add(time.Second)) {
			t.Errorf("Hello.sent_unix_ms = %v, not the time it was sent (%v)", sent, before)
		}
		return h
	}
	h1 := hello(dir)
	if !regexp.MustCompile(`^gpu1-lab-[0-9a-f]{6}$`).MatchString(h1.GetWorkerId()) {
		t.Fatalf("default worker id %q; want gpu1-lab-<6 hex digits>", h1.GetWorkerId())
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(h1.GetInstance()) {
		t.Fatalf("Hello.instance %q; want 32 hex digits", h1.GetInstance())
	}
	h2 := hello(dir)
	if h2.GetWorkerId() != h1.GetWorkerId() || h2.GetInstance() != h1.GetInstance() {
		t.Fatalf("a restart on the same dir is %s/%s, was %s/%s", h2.GetWorkerId(), h2.GetInstance(), h1.GetWorkerId(), h1.GetInstance())
	}
	h3 := hello(testutil.ReachableTempDir(t))
	if h3.GetWorkerId() == h1.GetWorkerId() || h3.GetInstance() == h1.GetInstance() {
		t.Fatalf("another data dir on the same host is %s/%s too", h3.GetWorkerId(), h3.GetInstance())
	}
}
