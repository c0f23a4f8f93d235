package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/sqlite"
)

func TestTargets(t *testing.T) {
	ctx := context.Background()
	open, err := ParseTargets("")
	if err != nil {
		t.Fatal(err)
	}
	lab, err := ParseTargets("127.0.0.1, hooks.lab.example, 10.9.0.0/16 [::1]")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseTargets("http://x/"); err == nil {
		t.Fatal("ParseTargets took a URL")
	}
	f := func(tg *Targets, raw string, ok bool, want string) {
		t.Helper()
		err := tg.Check(ctx, raw)
		if (err == nil) != ok || (want != "" && (err == nil || !strings.Contains(err.Error(), want))) {
			t.Errorf("Check(%q) = %v, want ok %v (%q)", raw, err, ok, want)
		}
	}
	f(open, "ftp://example.com/x", false, "http:// or https://")
	f(open, "file:///etc/passwd", false, "http:// or https://")
	f(open, "javascript:alert(1)", false, "http:// or https://")
	f(open, "https:///nohost", false, "no host")
	f(open, "https://"+strings.Repeat("a", MaxURLBytes), false, "longer")
	f(open, "http://127.0.0.1:9/hook", false, "loopback")
	f(open, "http://[::1]:9/hook", false, "loopback")
	f(open, "http://169.254.169.254/latest/meta-data", false, "link-local")
	f(open, "http://10.1.2.3/hook", false, "private")
	f(open, "http://192.168.1.1/hook", false, "private")
	f(open, "http://100.64.0.1/hook", false, "private")
	f(open, "http://0.0.0.0/hook", false, "")
	f(open, "http://[::ffff:127.0.0.1]/hook", false, "loopback")
	f(open, "https://8.8.8.8/hook", true, "")
	// Addresses that carry an IPv4 one, and the rest of the special
	// blocks: refused whatever they embed.
	for _, host := range []string{
		"[64:ff9b::a00:1]", "[64:ff9b::808:808]", "[64:ff9b:1::1]", // NAT64, well-known and local-use
		"[2002:7f00:1::1]", "[2002:808:808::1]", // 6to4
		"[2001:0:4136:e378:8000:63bf:3fff:fdd2]", // Teredo
		"[::127.0.0.1]", "[::8.8.8.8]",           // IPv4-compatible
		"[::]", "[fc00::1]", "[fd12:3456::1]", "[fe80::1]", "[fec0::1]", "[ff02::1]", "[100::1]",
		"[2001:db8::1]", "[3fff::1]", "[5f00::1]",
		"192.0.0.8", "192.0.2.1", "198.18.0.1", "198.51.100.7", "203.0.113.9", "224.0.0.1",
		"239.255.255.250", "240.0.0.1", "255.255.255.255", "192.88.99.1",
	} {
		f(open, "http://"+host+"/hook", false, "only public hosts")
	}
	f(open, "https://[2606:4700:4700::1111]/hook", true, "")
	f(lab, "http://127.0.0.1:9/hook", true, "")
	f(lab, "http://[::1]:9/hook", true, "")
	f(lab, "http://10.9.3.4/hook", true, "")
	f(lab, "http://10.8.3.4/hook", false, "NOTIFY_ALLOW_HOSTS does not name")
	f(lab, "https://8.8.8.8/hook", false, "NOTIFY_ALLOW_HOSTS does not name")
	if _, err := lab.CheckURL("https://HOOKS.lab.example./x"); err != nil {
		t.Errorf("a listed name in another case: %v", err)
	}
}

// receiver is a real local HTTP server that records the POSTs it gets and
// answers each with the next status of answers (then 200).
type receiver struct {
	*httptest.Server
	mu      sync.Mutex
	bodies  [][]byte
	headers []http.Header
	answers []int
	got     chan struct{}
}

func newReceiver(t *testing.T, answers ...int) *receiver {
	r := &receiver{answers: answers, got: make(chan struct{}, 64)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.bodies = append(r.bodies, b)
		r.headers = append(r.headers, req.Header.Clone())
		code := 200
		if len(r.answers) > 0 {
			code, r.answers = r.answers[0], r.answers[1:]
		}
		r.mu.Unlock()
		w.WriteHeader(code)
		r.got <- struct{}{}
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-r.got:
		case <-time.After(30 * time.Second):
			t.Fatalf("the receiver got %d of %d POSTs", len(r.all()), n)
		}
	}
}

func (r *receiver) all() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.bodies...)
}

// stats waits until n counts sent and failed notifications (the receiver
// hears of a POST before its sender counts it).
func stats(t *testing.T, n *Notifier, sent, failed int64) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		s, f, _ := n.Stats()
		return s == sent && f == failed, fmt.Sprintf("sent %d failed %d, want %d and %d", s, f, sent, failed)
	})
}

type env struct {
	st   store.Store
	n    *Notifier
	user core.User
}

func newEnv(t *testing.T, allow string, webhook string, on ...string) *env {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	u := core.User{Username: "alice", PasswordHash: "x"}
	if err := st.CreateUser(context.Background(), &u); err != nil {
		t.Fatal(err)
	}
	if err := st.SetNotify(context.Background(), u.ID, core.Notify{Webhook: webhook, On: on}); err != nil {
		t.Fatal(err)
	}
	tg, err := ParseTargets(allow)
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{Users: st, Targets: tg, BaseURL: "https://rlsched.lab.example/", Senders: 1,
		Retries: []time.Duration{time.Millisecond, time.Millisecond}, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return &env{st: st, n: n, user: u}
}

func (e *env) run(id string, st core.Status) core.Task {
	started := time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)
	ended := started.Add(10*time.Hour + 2*time.Minute)
	reward, code := 187.5, 1
	return core.Task{ID: id, Name: "ppo <cartpole>", UserID: e.user.ID, User: e.user.Username, Status: st, Attempt: 1,
		StartedAt: &started, FinishedAt: &ended, FinalReward: &reward, ExitCode: &code, Error: "exit status 1",
		ErrorTail: "l1\nl2\nTraceback:\n  x()\nKeyError: <x>\nl6",
		Env:       map[string]string{"WANDB_API_KEY": "secret"}, TraceID: "trace-1"}
}

// TestNotifyFailedRun: a failed run POSTs a Slack-compatible body with the
// run's name, status, run time, final reward and link, and the run with
// its env values masked; a 5xx is retried, the event sent once.
func TestNotifyFailedRun(t *testing.T) {
	rcv := newReceiver(t, 503)
	e := newEnv(t, "127.0.0.1", rcv.URL+"/hook")
	t0 := e.run("r-1", core.StatusFailed)
	e.n.TaskChanged(t0)
	e.n.TaskChanged(t0) // a second write of the ended run (its final reward)
	rcv.wait(t, 2)      // the 503, then the retry
	bodies := rcv.all()
	var got struct {
		Text string    `json:"text"`
		Run  core.Task `json:"run"`
	}
	if err := json.Unmarshal(bodies[1], &got); err != nil {
		t.Fatalf("body %s: %v", bodies[1], err)
	}
	for _, want := range []string{"<https://rlsched.lab.example/runs/r-1|ppo &lt;cartpole&gt;>", "FAILED", "exit code 1",
		"after 10h2m0s", "final reward 187.5", "exit status 1", "\n```\nl2\nTraceback:\n  x()\nKeyError: &lt;x&gt;\nl6\n```"} {
		if !strings.Contains(got.Text, want) {
			t.Errorf("text %q lacks %q", got.Text, want)
		}
	}
	if got.Run.ID != "r-1" || got.Run.Status != core.StatusFailed || got.Run.Env["WANDB_API_KEY"] != core.MaskedValue {
		t.Errorf("run in the body: %+v", got.Run)
	}
	rcv.mu.Lock()
	h := rcv.headers[1]
	rcv.mu.Unlock()
	if h.Get("Content-Type") != "application/json" || h.Get("X-Trace-Id") != "trace-1" {
		t.Errorf("headers %v", h)
	}
	// Nothing more comes: not the duplicate, not a third try.
	e.n.TaskChanged(e.run("r-2", core.StatusFailed))
	rcv.wait(t, 1) // one sender, in order: the duplicate would come first
	if all := rcv.all(); len(all) != 3 || !strings.Contains(string(all[2]), `"id":"r-2"`) {
		t.Fatalf("the receiver got %d POSTs, the last %s; want 3, the last of r-2", len(all), all[len(all)-1])
	}
	stats(t, e.n, 2, 0)
}

// TestNotifyFilters: only the statuses asked for; a 4xx is not retried;
// the master's own network is refused without NOTIFY_ALLOW_HOSTS.
func TestNotifyFilters(t *testing.T) {
	rcv := newReceiver(t, 404)
	e := newEnv(t, "127.0.0.1", rcv.URL, "TIMEOUT", "SUCCEEDED")
	e.n.TaskChanged(e.run("r-run", core.StatusRunning))
	e.n.TaskChanged(e.run("r-fail", core.StatusFailed)) // not asked for
	e.n.TaskChanged(e.run("r-to", core.StatusTimeout))  // 404: given up at once
	e.n.TaskChanged(e.run("r-ok", core.StatusSucceeded))
	rcv.wait(t, 2)
	var texts []string
	for _, b := range rcv.all() {
		var got struct{ Text string }
		_ = json.Unmarshal(b, &got)
		texts = append(texts, got.Text)
	}
	if len(texts) != 2 || !strings.Contains(texts[0], "TIMEOUT") || !strings.Contains(texts[1], "SUCCEEDED") {
		t.Fatalf("notifications %q", texts)
	}
	stats(t, e.n, 1, 1)

	shut := newReceiver(t)
	e = newEnv(t, "", shut.URL) // no list: 127.0.0.1 is this network
	e.n.TaskChanged(e.run("r-x", core.StatusFailed))
	stats(t, e.n, 0, 1)
	if n := len(shut.all()); n != 0 {
		t.Fatalf("a loopback webhook got %d POSTs without NOTIFY_ALLOW_HOSTS", n)
	}
}

// TestNotifyNeverBlocks: with the sender stuck on a slow webhook, events
// past the queue are dropped and counted, and TaskChanged returns at once.
func TestNotifyNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	t.Cleanup(slow.Close)
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	u := core.User{Username: "alice", PasswordHash: "x"}
	if err := st.CreateUser(context.Background(), &u); err != nil {
		t.Fatal(err)
	}
	if err := st.SetNotify(context.Background(), u.ID, core.Notify{Webhook: slow.URL}); err != nil {
		t.Fatal(err)
	}
	tg, _ := ParseTargets("127.0.0.1")
	n, err := New(Config{Users: st, Targets: tg, Queue: 2, Senders: 1, Timeout: time.Minute, Retries: []time.Duration{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	t.Cleanup(func() { close(release) }) // first: the handler returns, the server can close
	start := time.Now()
	for i := range 50 {
		n.TaskChanged(core.Task{ID: "r" + string(rune('a'+i%26)) + string(rune('a'+i/26)), UserID: u.ID, Status: core.StatusFailed})
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("50 TaskChanged took %v", d)
	}
	if _, _, dropped := n.Stats(); dropped < 47 {
		t.Fatalf("dropped %d of 50 with a queue of 2 and one sender, want at least 47", dropped)
	}
}

// countingUsers counts the reads of the owners' settings.
type countingUsers struct {
	Users
	n atomic.Int64
}

func (c *countingUsers) UserByID(ctx context.Context, id int64) (core.User, error) {
	c.n.Add(1)
	return c.Users.UserByID(ctx, id)
}

// TestNotifyReadsSettingsOncePerTTL: the owner's settings read for one
// notification serve the next ones within UserTTL; past it, a changed
// webhook is read and used.
func TestNotifyReadsSettingsOncePerTTL(t *testing.T) {
	for _, tc := range []struct {
		ttl       time.Duration
		wantReads int64
		moved     bool // the second run's POST goes to the new webhook
	}{{time.Hour, 1, false}, {time.Nanosecond, 2, true}} {
		old, moved := newReceiver(t), newReceiver(t)
		e := newEnv(t, "127.0.0.1", old.URL)
		users := &countingUsers{Users: e.st}
		n, err := New(Config{Users: users, Targets: e.n.cfg.Targets, Senders: 1, UserTTL: tc.ttl,
			Logger: zerolog.New(zerolog.NewTestWriter(t))})
		if err != nil {
			t.Fatal(err)
		}
		n.TaskChanged(e.run("r-1", core.StatusFailed))
		old.wait(t, 1)
		if err := e.st.SetNotify(t.Context(), e.user.ID, core.Notify{Webhook: moved.URL}); err != nil {
			t.Fatal(err)
		}
		n.TaskChanged(e.run("r-2", core.StatusFailed))
		if tc.moved {
			moved.wait(t, 1)
		} else {
			old.wait(t, 1)
		}
		stats(t, n, 2, 0)
		n.Close()
		if got := users.n.Load(); got != tc.wantReads {
			t.Errorf("UserTTL %v: %d reads of the settings for two runs, want %d", tc.ttl, got, tc.wantReads)
		}
	}
}

// TestNotifySweepOnce: a sweep's members send nothing of their own; the
// sweep sends one message once its last member ended, with the counts and
// a failed member's stderr tail (issue 32: a sweep of 100 was 100 messages).
func TestNotifySweepOnce(t *testing.T) {
	rcv := newReceiver(t)
	e := newEnv(t, "127.0.0.1", rcv.URL+"/hook", "FAILED")
	e.n.Close()
	tg, _ := ParseTargets("127.0.0.1")
	n, err := New(Config{Users: e.st, Sweeps: e.st, Targets: tg, Senders: 2, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	sw := &store.Sweep{ID: "s1", Name: "lr sweep", UserID: e.user.ID, Members: 3,
		Spec: json.RawMessage(`{"grid": {"lr": [0.1, 0.2, 0.3]}}`), CreatedAt: time.Now()}
	var ms []*core.Task
	for i := range 3 {
		ms = append(ms, &core.Task{ID: fmt.Sprintf("r-s1-%d", i), UserID: e.user.ID, Command: []string{"x"},
			Tags: []string{core.SweepTag("s1")}, Params: json.RawMessage(`{}`), CreatedAt: time.Now()})
	}
	if err := e.st.CreateSweep(ctx, sw, ms); err != nil {
		t.Fatal(err)
	}
	endRun := func(id string, st core.Status, tail string, sync bool) {
		t.Helper()
		tk, err := e.st.Task(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
		tk.Status, tk.ErrorTail = st, tail
		if err := e.st.UpdateTask(ctx, &tk, exp); err != nil {
			t.Fatal(err)
		}
		if sync { // as a sender handles it, so that nothing sent is seen now
			n.notify(tk)
		} else {
			n.TaskChanged(tk)
		}
	}
	endRun("r-s1-0", core.StatusFailed, "Traceback:\nKeyError: lr", true)
	endRun("r-s1-1", core.StatusSucceeded, "", true)
	if all := rcv.all(); len(all) != 0 {
		t.Fatalf("members of a sweep still running sent %s", all)
	}
	endRun("r-s1-2", core.StatusFailed, "", false)
	n.TaskChanged(mustTask(t, e.st, "r-s1-2")) // a second write of the last one
	rcv.wait(t, 1)
	var got struct {
		Text  string `json:"text"`
		Sweep struct {
			ID      string         `json:"id"`
			Members int            `json:"members"`
			Counts  map[string]int `json:"counts"`
		} `json:"sweep"`
		Run core.Task `json:"run"`
	}
	if err := json.Unmarshal(rcv.all()[0], &got); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sweep lr sweep (s1) ended, 3 members: 1 SUCCEEDED, 2 FAILED", "run r-s1-0", "KeyError: lr"} {
		if !strings.Contains(got.Text, want) {
			t.Errorf("text %q lacks %q", got.Text, want)
		}
	}
	if got.Sweep.ID != "s1" || got.Sweep.Members != 3 || got.Sweep.Counts["FAILED"] != 2 || got.Run.ID != "r-s1-2" {
		t.Errorf("body: %+v", got)
	}
	stats(t, n, 1, 0)
	if all := rcv.all(); len(all) != 1 {
		t.Fatalf("%d messages for one sweep: %s", len(all), all)
	}
}

// TestNotifyPipelineOnce: a pipeline's steps send nothing of their own;
// the pipeline sends one message once every step's latest run ended, with
// the counts and a failed step's stderr tail, and a retry's end another;
// a run of no pipeline still sends its own.
func TestNotifyPipelineOnce(t *testing.T) {
	rcv := newReceiver(t)
	e := newEnv(t, "127.0.0.1", rcv.URL+"/hook")
	e.n.Close()
	tg, _ := ParseTargets("127.0.0.1")
	n, err := New(Config{Users: e.st, Sweeps: e.st, Pipelines: e.st, Targets: tg, Senders: 2,
		BaseURL: "https://rlsched.lab.example", Logger: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	run := func(id string, after ...string) *core.Task {
		tk := &core.Task{ID: id, UserID: e.user.ID, Command: []string{"x"}, Params: json.RawMessage(`{}`), CreatedAt: time.Now()}
		for _, a := range after {
			tk.After = append(tk.After, core.Dep{Run: a, When: core.WhenSucceeded})
		}
		return tk
	}
	p := &store.Pipeline{ID: "p1", Name: "train-eval", UserID: e.user.ID, CreatedAt: time.Now(),
		Steps: []store.PipelineStep{{Name: "train"}, {Name: "eval"}, {Name: "report"}}}
	if err := e.st.CreatePipeline(ctx, p, []*core.Task{run("a1"), run("b1", "a1"), run("c1")}); err != nil {
		t.Fatal(err)
	}
	endRun := func(id string, st core.Status, tail string, sync bool) {
		t.Helper()
		tk := mustTask(t, e.st, id)
		exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
		tk.Status, tk.ErrorTail = st, tail
		if st == core.StatusFailed {
			tk.Error = "exit code 1"
		}
		if err := e.st.UpdateTask(ctx, &tk, exp); err != nil {
			t.Fatal(err)
		}
		if sync { // as a sender handles it, so that nothing sent is seen now
			n.notify(tk)
		} else {
			n.TaskChanged(tk)
		}
	}
	type body struct {
		Text     string `json:"text"`
		Pipeline struct {
			ID     string         `json:"id"`
			Name   string         `json:"name"`
			Steps  int            `json:"steps"`
			Counts map[string]int `json:"counts"`
		} `json:"pipeline"`
		Run core.Task `json:"run"`
	}
	last := func() body {
		t.Helper()
		all := rcv.all()
		var got body
		if err := json.Unmarshal(all[len(all)-1], &got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	endRun("a1", core.StatusFailed, "Traceback:\nKeyError: lr", true)
	endRun("c1", core.StatusSucceeded, "", true)
	if all := rcv.all(); len(all) != 0 {
		t.Fatalf("steps of a pipeline still going sent %s", all)
	}
	endRun("b1", core.StatusCancelled, "", false) // its parent failed
	n.TaskChanged(mustTask(t, e.st, "b1"))        // a second write of the last one
	rcv.wait(t, 1)
	got := last()
	for _, want := range []string{"pipeline <https://rlsched.lab.example/pipelines/p1|train-eval> ended, 3 steps: ",
		"1 SUCCEEDED", "1 FAILED", "1 CANCELLED", "failed, e.g. run a1: exit code 1", "KeyError: lr"} {
		if !strings.Contains(got.Text, want) {
			t.Errorf("text %q lacks %q", got.Text, want)
		}
	}
	if got.Pipeline.ID != "p1" || got.Pipeline.Name != "train-eval" || got.Pipeline.Steps != 3 ||
		got.Pipeline.Counts["FAILED"] != 1 || got.Run.ID != "b1" {
		t.Errorf("body: %+v", got)
	}
	stats(t, n, 1, 0)

	// A retry of train and eval: its end is a second message.
	a2, b2 := run("a2"), run("b2", "a2")
	if err := e.st.RetryPipeline(ctx, "p1", []int{0, 1}, []string{"a1", "b1"}, []*core.Task{a2, b2}); err != nil {
		t.Fatal(err)
	}
	endRun("a2", core.StatusSucceeded, "", true)
	if all := rcv.all(); len(all) != 1 {
		t.Fatalf("a retried pipeline still going sent %d messages", len(all))
	}
	endRun("b2", core.StatusSucceeded, "", false)
	rcv.wait(t, 1)
	if got := last(); !strings.Contains(got.Text, "ended, 3 steps: 3 SUCCEEDED") || strings.Contains(got.Text, "failed") {
		t.Errorf("the retry's end: %q", got.Text)
	}

	// A run of no pipeline is its own message.
	n.TaskChanged(e.run("solo", core.StatusFailed))
	rcv.wait(t, 1)
	if got := last(); got.Run.ID != "solo" || !strings.Contains(got.Text, "rlsched: run ") {
		t.Errorf("a run of no pipeline: %+v", got)
	}
	stats(t, n, 3, 0)
}

func mustTask(t *testing.T, st store.Store, id string) core.Task {
	t.Helper()
	tk, err := st.Task(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}
