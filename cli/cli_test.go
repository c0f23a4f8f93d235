package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
)

type harness struct {
	t     *testing.T
	f     *fakeServer
	vars  map[string]string
	env   Env
	stdin string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, f: newFakeServer(t)}
	h.vars = map[string]string{"RLSCHED_SERVER": h.f.url()}
	h.env = Env{
		Getenv:    func(k string) string { return h.vars[k] },
		ConfigDir: filepath.Join(t.TempDir(), "cfg"),
		Dir:       t.TempDir(),
		waitEvery: 2 * time.Millisecond,
		logsEvery: 2 * time.Millisecond,
	}
	return h
}

// run runs `rlsched args...` and returns its exit code and outputs.
func (h *harness) run(args ...string) (code int, stdout, stderr string) {
	h.t.Helper()
	var out, errb bytes.Buffer
	env := h.env
	env.Stdout, env.Stderr, env.Stdin = &out, &errb, strings.NewReader(h.stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code = Run(ctx, args[0], args[1:], env)
	return code, out.String(), errb.String()
}

// mustRun runs and fails the test unless the exit code is want.
func (h *harness) mustRun(want int, args ...string) (stdout, stderr string) {
	h.t.Helper()
	code, out, errs := h.run(args...)
	if code != want {
		h.t.Fatalf("rlsched %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errs)
	}
	return out, errs
}

// login registers alice on the fake server and logs her in.
func (h *harness) login() {
	h.t.Helper()
	h.f.addUser("alice", "password1")
	h.mustRun(0, "login", "-u", "alice", "-p", "password1")
}

func TestCommands(t *testing.T) {
	want := []string{"artifacts", "attach", "cancel", "code", "code-diff", "compare", "diff", "download", "edit", "gpus", "login", "logout", "logs", "ls", "metrics", "notebook", "notify", "pipeline", "queue", "quota", "register", "rerun", "shell", "show", "sim", "submit", "sweep", "token", "user", "whoami", "workers"}
	if got := Commands(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Commands() = %v, want %v", got, want)
	}
	var b bytes.Buffer
	Usage(&b)
	for _, n := range want {
		if !strings.Contains(b.String(), "  "+n+" ") {
			t.Errorf("Usage lacks %s:\n%s", n, b.String())
		}
	}
}

func TestLogin_SavesCredentialsAndCommandsSendToken(t *testing.T) {
	h := newHarness(t)
	// register, then log in naming the server with --server only.
	delete(h.vars, "RLSCHED_SERVER")
	out, _ := h.mustRun(0, "register", "--server", h.f.url(), "-u", "alice", "-p", "password1")
	if !strings.Contains(out, "registered alice") {
		t.Errorf("register output %q", out)
	}
	h.stdin = "password1\n"
	out, _ = h.mustRun(0, "login", "--server", h.f.url()+"/", "-u", "alice", "--password-stdin")
	if !strings.Contains(out, "logged in to "+h.f.url()+" as alice") {
		t.Errorf("login output %q", out)
	}

	path := filepath.Join(h.env.ConfigDir, "credentials.json")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" {
		if st.Mode().Perm() != 0o600 {
			t.Errorf("credentials mode %04o, want 0600", st.Mode().Perm())
		}
		dst, _ := os.Stat(h.env.ConfigDir)
		if dst.Mode().Perm() != 0o700 {
			t.Errorf("config dir mode %04o, want 0700", dst.Mode().Perm())
		}
	}
	var c credentials
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.Server != h.f.url() || c.Token != tokenFor("alice") || c.Username != "alice" {
		t.Errorf("saved %+v", c)
	}

	// A later command uses the saved server and sends the token.
	out, _ = h.mustRun(0, "whoami")
	if !strings.Contains(out, "alice (USER) on "+h.f.url()+"\noutputs kept: 3.0 GiB of 1.0 TiB\n") {
		t.Errorf("whoami output %q", out)
	}
	h.f.mu.Lock()
	last := h.f.authSeen[len(h.f.authSeen)-1]
	h.f.mu.Unlock()
	if last != "Bearer "+tokenFor("alice") {
		t.Errorf("whoami sent Authorization %q", last)
	}

	// RLSCHED_TOKEN overrides the saved token.
	h.f.addUser("bob", "password2")
	h.vars["RLSCHED_TOKEN"] = tokenFor("bob")
	out, _ = h.mustRun(0, "whoami")
	if !strings.HasPrefix(out, "bob ") {
		t.Errorf("with RLSCHED_TOKEN whoami = %q", out)
	}
	delete(h.vars, "RLSCHED_TOKEN")

	// The saved token is not sent to another server.
	other := newFakeServer(t)
	other.addUser("alice", "x")
	_, errs := h.mustRun(1, "whoami", "--server", other.url())
	if !strings.Contains(errs, "not logged in to "+other.url()) {
		t.Errorf("other server: stderr %q", errs)
	}
	other.mu.Lock()
	if a := other.authSeen[len(other.authSeen)-1]; a != "" {
		t.Errorf("token leaked to another server: %q", a)
	}
	other.mu.Unlock()

	// logout forgets it.
	h.mustRun(0, "logout")
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("credentials still there after logout: %v", err)
	}
	h.vars["RLSCHED_SERVER"] = h.f.url()
	_, errs = h.mustRun(1, "whoami")
	if !strings.Contains(errs, "not logged in: run `rlsched login -u NAME`") {
		t.Errorf("after logout stderr %q", errs)
	}
}

func TestLogin_Failures(t *testing.T) {
	h := newHarness(t)
	h.f.addUser("alice", "password1")
	_, errs := h.mustRun(1, "login", "-u", "alice", "-p", "wrong")
	if !strings.Contains(errs, "bad user name or password") || !strings.Contains(errs, "trace id: T") {
		t.Errorf("stderr %q", errs)
	}
	if _, err := os.Stat(filepath.Join(h.env.ConfigDir, "credentials.json")); !os.IsNotExist(err) {
		t.Errorf("a failed login saved credentials")
	}
	_, errs = h.mustRun(1, "register", "-u", "alice", "-p", "password1")
	if !strings.Contains(errs, "already taken") || !strings.Contains(errs, "rlsched login -u alice") {
		t.Errorf("register conflict stderr %q", errs)
	}
}

// trainBody returns the last POST /api/train body, decoded keeping numbers as written.
func (h *harness) trainBody() map[string]any {
	h.t.Helper()
	h.f.mu.Lock()
	b := h.f.trainBody
	h.f.mu.Unlock()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		h.t.Fatalf("train body %q: %v", b, err)
	}
	return m
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestSubmit_AlgorithmMode(t *testing.T) {
	h := newHarness(t)
	h.login()
	out, _ := h.mustRun(0, "submit", "--algorithm", "ppo", "--episodes", "500", "--lr", "3e-4",
		"--param", "seed=3", "--param", "gamma=0.99", "--param", "norm=true", "--param", "env=CartPole-v1",
		"--gpus", "2", "--priority", "-1", "--max-retries", "0", "--timeout", "1h30m",
		"--name", "ppo-cart", "--project", "cart", "--tag", "a", "--tag", "b")
	if !regexp.MustCompile(`^r\d{4}\n$`).MatchString(out) {
		t.Fatalf("stdout %q: want just the id", out)
	}
	m := h.trainBody()
	want := map[string]string{
		"algorithm":      `"ppo"`,
		"episodes":       `500`,
		"learningRate":   `0.0003`,
		"params":         `{"env":"CartPole-v1","gamma":0.99,"norm":true,"seed":3}`,
		"gpus":           `2`,
		"priority":       `-1`,
		"maxRetries":     `0`,
		"timeoutSeconds": `5400`,
		"name":           `"ppo-cart"`,
		"project":        `"cart"`,
		"tags":           `["a","b"]`,
	}
	for k, v := range want {
		if got := jsonString(m[k]); got != v {
			t.Errorf("%s = %s, want %s", k, got, v)
		}
	}
	for _, k := range []string{"command", "workdir", "env"} {
		if _, ok := m[k]; ok {
			t.Errorf("algorithm mode sent %s = %v", k, m[k])
		}
	}
}

func TestSubmit_CommandMode(t *testing.T) {
	h := newHarness(t)
	h.login()
	out, _ := h.mustRun(0, "submit", "--param", "lr=1e-4", "--param", "steps=100000", "--param", "name=x y",
		"--param", "ver=1.2.3", "--param", "flag=false", "--env", "A=1", "--env", "B=x=y",
		"--tag", "sweep", "--", "python3", "train.py", "--gpus", "7", "--", "x")
	id := strings.TrimSpace(out)
	m := h.trainBody()
	if got := jsonString(m["command"]); got != `["python3","train.py","--gpus","7","--","x"]` {
		t.Errorf("command = %s", got)
	}
	if got := jsonString(m["params"]); got != `{"flag":false,"lr":1e-4,"name":"x y","steps":100000,"ver":"1.2.3"}` {
		t.Errorf("params = %s", got)
	}
	if got := jsonString(m["env"]); got != `{"A":"1","B":"x=y"}` {
		t.Errorf("env = %s", got)
	}
	if m["workdir"] != h.env.Dir {
		t.Errorf("workdir = %v, want the current directory %s", m["workdir"], h.env.Dir)
	}
	if got := jsonString(m["tags"]); got != `["sweep"]` {
		t.Errorf("tags = %s", got)
	}
	for _, k := range []string{"algorithm", "gpus", "maxRetries", "code"} {
		if _, ok := m[k]; ok {
			t.Errorf("sent %s = %v though not asked", k, m[k])
		}
	}
	if id == "" {
		t.Fatal("no id")
	}

	// --workdir overrides the default; --json prints the server's answer.
	out, _ = h.mustRun(0, "submit", "--workdir", "/data/exp", "--json", "--", "./run.sh")
	if got := h.trainBody()["workdir"]; got != "/data/exp" {
		t.Errorf("workdir = %v", got)
	}
	var ans submitAnswer
	if err := json.Unmarshal([]byte(out), &ans); err != nil || ans.ID == "" || ans.Status != core.StatusQueued {
		t.Errorf("--json output %q: %v", out, err)
	}
	// A relative --workdir is the current directory's: the API takes
	// absolute paths only.
	h.mustRun(0, "submit", "--workdir", "exp/a", "--", "./run.sh")
	if got := h.trainBody()["workdir"]; got != filepath.Join(h.env.Dir, "exp/a") {
		t.Errorf("relative workdir = %v, want it under %s", got, h.env.Dir)
	}
}

func TestSubmit_Wait(t *testing.T) {
	f := func(final core.Status, wantCode int) {
		t.Helper()
		h := newHarness(t)
		h.login()
		// The run is queued, runs for a few polls, then ends as final.
		h.f.mu.Lock()
		id := "r0001"
		h.f.statuses[id] = []core.Status{core.StatusQueued, core.StatusRunning, core.StatusRunning, final}
		h.f.mu.Unlock()
		code, out, errs := h.run("submit", "--wait", "--", "python3", "train.py")
		if out != id+"\n" {
			t.Errorf("stdout %q, want the id", out)
		}
		if code != wantCode {
			t.Errorf("final %s: exit %d, want %d\nstderr:\n%s", final, code, wantCode, errs)
		}
		if !strings.Contains(errs, id+" RUNNING") {
			t.Errorf("no progress line in stderr:\n%s", errs)
		}
		if !strings.Contains(errs, id+" "+string(final)+"  exit code") {
			t.Errorf("no final line in stderr:\n%s", errs)
		}
	}
	f(core.StatusSucceeded, 0)
	f(core.StatusFailed, 1)
	f(core.StatusCancelled, 1)
}

func TestSubmit_WaitPrintsExitCodeAndReward(t *testing.T) {
	h := newHarness(t)
	h.login()
	exit, reward := 0, 195.5
	now := time.Now()
	id := h.f.addTask(core.Task{Status: core.StatusRunning, ExitCode: &exit, FinalReward: &reward, FinishedAt: &now})
	h.f.mu.Lock()
	h.f.statuses[id] = []core.Status{core.StatusRunning, core.StatusSucceeded}
	h.f.mu.Unlock()
	// rerun --wait --json: the new run's id comes from the fake; wait on the original instead.
	var out, errb bytes.Buffer
	inv := &invocation{ctx: context.Background(), env: h.env.withDefaults(), cmd: commands["submit"]}
	inv.env.Stdout, inv.env.Stderr = &out, &errb
	inv.newFlags()
	c, _, _ := inv.newClient()
	code := inv.waitRun(c, id, waitFlags{wait: true, json: true})
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	if !strings.Contains(errb.String(), id+" SUCCEEDED  exit code 0  finalReward 195.5") {
		t.Errorf("summary:\n%s", errb.String())
	}
	var task core.Task
	if err := json.Unmarshal(out.Bytes(), &task); err != nil || task.ID != id {
		t.Errorf("--json output %q: %v", out.String(), err)
	}
}

func TestSubmit_Follow(t *testing.T) {
	h := newHarness(t)
	h.login()
	h.f.mu.Lock()
	h.f.onLogRead = func(id string, n int) {
		if n <= 3 {
			h.f.logs[id] = append(h.f.logs[id], []byte("step "+string(rune('0'+n))+"\n")...)
		}
		if n == 3 {
			h.f.statuses[id] = []core.Status{core.StatusSucceeded}
		}
	}
	h.f.statuses["r0001"] = []core.Status{core.StatusRunning}
	h.f.mu.Unlock()
	out, errs := h.mustRun(0, "submit", "--follow", "--", "python3", "train.py")
	if out != "r0001\nstep 1\nstep 2\nstep 3\n" {
		t.Errorf("stdout %q", out)
	}
	if !strings.Contains(errs, "r0001 SUCCEEDED") {
		t.Errorf("stderr %q", errs)
	}
}

func TestLs_TableAndAllPages(t *testing.T) {
	h := newHarness(t)
	h.login()
	r := 1.23456
	for i := 0; i < 5; i++ {
		h.f.addTask(core.Task{Name: "run" + string(rune('A'+i)), User: "alice", Status: core.StatusSucceeded,
			Worker: "w1", GPUs: 1, FinalReward: &r, CreatedAt: time.Now().Add(-3*time.Minute - time.Second)})
	}
	out, errs := h.mustRun(0, "ls", "--limit", "2")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("ls --limit 2: %d lines:\n%s", len(lines), out)
	}
	if !regexp.MustCompile(`^ID\s+STATUS\s+NAME\s+USER\s+WORKER\s+GPUS\s+REWARD\s+CREATED$`).MatchString(lines[0]) {
		t.Errorf("header %q", lines[0])
	}
	if !regexp.MustCompile(`^r0005\s+SUCCEEDED\s+runE\s+alice\s+w1\s+1\s+1\.2346\s+3m$`).MatchString(lines[1]) {
		t.Errorf("row %q", lines[1])
	}
	if !strings.Contains(errs, "--all") {
		t.Errorf("no hint about more pages: %q", errs)
	}

	h.f.mu.Lock()
	h.f.listReqs = nil
	h.f.mu.Unlock()
	out, _ = h.mustRun(0, "ls", "--all", "--limit", "2")
	lines = strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 6 {
		t.Fatalf("ls --all: %d lines:\n%s", len(lines), out)
	}
	for i, want := range []string{"r0005", "r0004", "r0003", "r0002", "r0001"} {
		if !strings.HasPrefix(lines[i+1], want+" ") {
			t.Errorf("row %d = %q, want %s", i, lines[i+1], want)
		}
	}
	h.f.mu.Lock()
	reqs := strings.Join(h.f.listReqs, " ")
	h.f.mu.Unlock()
	if reqs != "limit=2 cursor=c2&limit=2 cursor=c4&limit=2" {
		t.Errorf("requests %q", reqs)
	}

	out, _ = h.mustRun(0, "ls", "--all", "--limit", "2", "--json", "--status", "succeeded")
	var page struct {
		Items      []core.Task `json:"items"`
		NextCursor string      `json:"nextCursor"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Items) != 5 || page.NextCursor != "" {
		t.Errorf("ls --all --json: %v, %d items, cursor %q", err, len(page.Items), page.NextCursor)
	}
}

func TestShow(t *testing.T) {
	h := newHarness(t)
	h.login()
	exit, r := 0, 12.5
	id := h.f.addTask(core.Task{Name: "n", User: "alice", Status: core.StatusSucceeded, Command: []string{"python3", "a b.py"},
		Params: json.RawMessage(`{"lr": 0.1}`), Env: map[string]string{"K": "V"}, Tags: []string{"x", "y"},
		ExitCode: &exit, FinalReward: &r, Code: core.CodeInfo{GitCommit: "abc", GitDirty: true}, CPUs: 2.5, MemoryMB: 4096,
		Reason: core.ReasonOutOfMemory, Usage: &core.Usage{CPUSeconds: 12.25, PeakMemoryMB: 4198, GPUSeconds: 180},
		RerunOf: "r0042", Preemptible: true, Preemptions: 2, ErrorTail: "Traceback:\nKeyError: 'x'",
		History: []core.HistoryEntry{{Status: "RUNNING", Attempt: 1, Worker: "w0", At: time.Now()},
			{Status: "PREEMPTED", Attempt: 1, Reason: "preempted by r0009 (priority 10)", At: time.Now()}},
		Worker: "w1", GPUIndices: []int{1}, GPUUUIDs: []string{"GPU-1"},
		Warnings: []core.Warning{{Code: "idle_gpu", Message: "GPU 1 idle (under 5% utilisation) for 1800 s", At: time.Now()}}})
	out, _ := h.mustRun(0, "show", id)
	for _, want := range []string{"id: " + id + "\n", "status: SUCCEEDED\n", "command: python3 'a b.py'\n",
		`params: {"lr":0.1}` + "\n", `env: {"K":"V"}` + "\n", "tags: x,y\n", "exitCode: 0\n",
		"finalReward: 12.5\n", "code: abc\n", "gitDirty: true\n", "worker: w1\n", "gpuUuids: GPU-1\n",
		"rerunOf: r0042\n", "preemptible: true\n", "preemptions: 2\n", "errorTail: |\n  Traceback:\n  KeyError: 'x'\n",
		" RUNNING attempt 1 on w0\n", " PREEMPTED attempt 1: preempted by r0009 (priority 10)\n",
		" idle_gpu: GPU 1 idle (under 5% utilisation) for 1800 s\n", "cpus: 2.5\n", "memory: 4 GiB\n", "reason: out_of_memory\n",
		"usage: 12.2 CPU-seconds, peak memory 4.1 GiB, 180 GPU-seconds\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	out, _ = h.mustRun(0, "show", "--json", id)
	if !strings.Contains(out, `"id": "`+id+`"`) {
		t.Errorf("show --json:\n%s", out)
	}

	// A RUNNING run shows what it uses now: the last sample of its
	// sys/cpu_cores and sys/memory_mb.
	running := h.f.addTask(core.Task{User: "alice", Status: core.StatusRunning, Command: []string{"train"}})
	h.f.mu.Lock()
	h.f.series[running] = map[string][][2]float64{"sys/cpu_cores": {{1767225600, 0.5}, {1767225610, 1.02}},
		"sys/memory_mb": {{1767225600, 100}, {1767225610, 812}}}
	h.f.mu.Unlock()
	if out, _ = h.mustRun(0, "show", running); !strings.Contains(out, "using: 1.02 cores, 812 MiB at 2026-01-01T00:00:10Z\n") {
		t.Errorf("show of a running run:\n%s", out)
	}
	if out, _ = h.mustRun(0, "show", id); !strings.Contains(out, "using: -\n") {
		t.Errorf("show of an ended run:\n%s", out)
	}
}

func TestLogs_FollowWritesEachByteOnceAndStops(t *testing.T) {
	for _, jsonMode := range []bool{false, true} {
		h := newHarness(t)
		h.login()
		id := h.f.addTask(core.Task{Status: core.StatusRunning})
		var want bytes.Buffer
		h.f.mu.Lock()
		h.f.logMax = 7 // the server answers at most 7 bytes: many polls, lines split
		h.f.logJSON = jsonMode
		h.f.logs[id] = []byte("TRACE_ID:abc\n")
		want.Write(h.f.logs[id])
		h.f.onLogRead = func(id string, n int) {
			switch {
			case n <= 10 && n%2 == 0: // new output on some polls, none on others
				line := []byte("episode " + strings.Repeat("x", n) + "\n")
				h.f.logs[id] = append(h.f.logs[id], line...)
				want.Write(line)
			case n == 12:
				// The run ends with output still to be read (no newline at the end).
				h.f.logs[id] = append(h.f.logs[id], "FINAL_REWARD:1.5"...)
				want.WriteString("FINAL_REWARD:1.5")
				h.f.tasks[id].Status = core.StatusSucceeded
			}
		}
		h.f.mu.Unlock()
		out, _ := h.mustRun(0, "logs", "-f", id)
		if out != want.String() {
			t.Errorf("json=%v: logs -f wrote\n%q\nwant\n%q", jsonMode, out, want.String())
		}
		h.f.mu.Lock()
		reads := h.f.logReads
		offs := h.f.logOffs
		h.f.mu.Unlock()
		if reads > 40 {
			t.Errorf("json=%v: %d log reads; it did not stop at the end", jsonMode, reads)
		}
		for i := 1; i < len(offs); i++ {
			if offs[i] < offs[i-1] {
				t.Errorf("json=%v: offset went back %d -> %d", jsonMode, offs[i-1], offs[i])
			}
		}

		// Without -f: the whole log at once, from --offset.
		out, _ = h.mustRun(0, "logs", id, "--offset", "9")
		if out != want.String()[9:] {
			t.Errorf("json=%v: logs --offset 9 = %q", jsonMode, out)
		}
	}
}

func TestLogs_UnknownRun(t *testing.T) {
	h := newHarness(t)
	h.login()
	_, errs := h.mustRun(1, "logs", "-f", "nope")
	if !strings.Contains(errs, "run nope not found") || !strings.Contains(errs, "rlsched ls") {
		t.Errorf("stderr %q", errs)
	}
}

func TestCancel(t *testing.T) {
	h := newHarness(t)
	h.login()
	id := h.f.addTask(core.Task{Status: core.StatusQueued})
	out, _ := h.mustRun(0, "cancel", id)
	if out != "CANCELLED\n" {
		t.Errorf("cancel stdout %q", out)
	}
	_, errs := h.mustRun(1, "cancel", id)
	if !strings.Contains(errs, "already finished (HTTP 409 conflict)") {
		t.Errorf("second cancel stderr %q", errs)
	}
	running := h.f.addTask(core.Task{Status: core.StatusRunning})
	if out, errs := h.mustRun(0, "cancel", running); out != "CANCELLING\n" || !strings.Contains(errs, "cancellation requested") {
		t.Errorf("cancel of a running run: stdout %q, stderr %q; want CANCELLING, not the status it had", out, errs)
	}
}

func TestRerun_MergesParams(t *testing.T) {
	h := newHarness(t)
	h.login()
	id := h.f.addTask(core.Task{Status: core.StatusSucceeded, Command: []string{"python3", "t.py"},
		Params: json.RawMessage(`{"lr":0.1,"seed":1,"big":12345678901234567890}`)})
	out, _ := h.mustRun(0, "rerun", id, "--param", "seed=7", "--param", "tag=new")
	newID := strings.TrimSpace(out)
	if newID == "" || newID == id {
		t.Fatalf("rerun printed %q", out)
	}
	h.f.mu.Lock()
	body := string(h.f.rerunBody)
	h.f.mu.Unlock()
	if body != `{"params":{"big":12345678901234567890,"lr":0.1,"seed":7,"tag":"new"}}` {
		t.Errorf("rerun body %s", body)
	}
	// No overrides: an empty object.
	h.mustRun(0, "rerun", id)
	h.f.mu.Lock()
	body = string(h.f.rerunBody)
	h.f.mu.Unlock()
	if body != `{}` {
		t.Errorf("rerun body %s", body)
	}
}

func TestMetrics(t *testing.T) {
	h := newHarness(t)
	h.login()
	id := h.f.addTask(core.Task{})
	h.f.mu.Lock()
	h.f.series[id] = map[string][][2]float64{"loss": {{1, 0.5}, {2, 0.25}}, "episode_reward": {{1, 10}, {2, 12.5}}}
	h.f.mu.Unlock()
	out, _ := h.mustRun(0, "metrics", id)
	want := "# episode_reward\nstep,value\n1,10\n2,12.5\n\n# loss\nstep,value\n1,0.5\n2,0.25\n"
	if out != want {
		t.Errorf("metrics:\n%s\nwant\n%s", out, want)
	}
	out, _ = h.mustRun(0, "metrics", id, "--names", "loss")
	if out != "# loss\nstep,value\n1,0.5\n2,0.25\n" {
		t.Errorf("metrics --names loss:\n%s", out)
	}
	out, _ = h.mustRun(0, "metrics", id, "--names", "loss", "--times")
	if out != "# loss\nstep,value,time_unix_ms\n1,0.5,\n2,0.25,1700000002000\n" {
		t.Errorf("metrics --times:\n%s", out)
	}
}

func TestWorkers(t *testing.T) {
	h := newHarness(t)
	h.login()
	out, errs := h.mustRun(0, "workers")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("workers:\n%s", out)
	}
	if !regexp.MustCompile(`^ID\s+STATE\s+HOST\s+GPUS\s+SLOTS\s+CPUS\s+MEMORY\s+ENFORCED\s+RUNNING\s+LAST HEARD$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^w1\s+RUNNING\s+gpu-a\s+2/2\s+4\s+2.5/16\s+4 GiB/64 GiB\s+none\s+1\s+\ds ago$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^w2\s+DOWN\s+gpu-b\s+0/0\s+2\s+-\s+-\s+cgroup-v1\s+0\s+never$`).MatchString(lines[2]) ||
		!regexp.MustCompile(`^w3\s+SILENT\s+gpu-c\s+0/0\s+1\s+-\s+-\s+-\s+1\s+4\ds ago$`).MatchString(lines[3]) {
		t.Errorf("workers:\n%s", out)
	}
	if errs != "warning: w1 does not enforce its runs' limits: not root\n" {
		t.Errorf("workers stderr %q", errs)
	}
}

// An unknown worker's hint names the workers, not the users.
func TestWorkersForgetUnknown(t *testing.T) {
	h := newHarness(t)
	h.login()
	code, _, errOut := h.run("workers", "forget", "w9")
	if code != ExitError || !strings.Contains(errOut, "rlsched workers") || strings.Contains(errOut, "user ls") {
		t.Fatalf("workers forget w9:\n%s", errOut)
	}
}

func TestGPUs(t *testing.T) {
	h := newHarness(t)
	h.login()
	out, _ := h.mustRun(0, "gpus")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("gpus:\n%s", out)
	}
	if !regexp.MustCompile(`^WORKER\s+GPU\s+NAME\s+UTIL\s+MEMORY\s+RUN\s+FOREIGN$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^w1\s+0\s+H100\s+3 %\s+2048 / 81559 MiB\s+r0001 \(idle 1m\d*s?\)\s+-$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^w1\s+1\s+H100\s+97 %\s+40000 / 81559 MiB\s+r0003 0.25 19.9 GiB, r0004 0.5\s+pid 4242 bob \(python notebook.py\) 1200 MiB$`).MatchString(lines[2]) {
		t.Errorf("gpus:\n%s", out)
	}
}

func TestErrors_ShowServerMessageAndTraceID(t *testing.T) {
	h := newHarness(t)
	h.login()
	code, out, errs := h.run("show", "r9999")
	if code != 1 || out != "" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	if !regexp.MustCompile(`rlsched show: run r9999 not found \(HTTP 404 not_found\)\n  trace id: T[0-9a-f]{32}\n`).MatchString(errs) {
		t.Errorf("stderr %q", errs)
	}

	// Not logged in: says what to do.
	h2 := newHarness(t)
	_, errs = h2.mustRun(1, "ls")
	if !strings.Contains(errs, "missing or invalid token (HTTP 401 unauthorized)") ||
		!strings.Contains(errs, "not logged in: run `rlsched login -u NAME`") || !strings.Contains(errs, "trace id: T") {
		t.Errorf("not logged in: stderr %q", errs)
	}

	// An expired token: log in again.
	h.vars["RLSCHED_TOKEN"] = ""
	h.f.mu.Lock()
	delete(h.f.users, "alice")
	h.f.mu.Unlock()
	_, errs = h.mustRun(1, "ls")
	if !strings.Contains(errs, "rlsched login -u alice` again") {
		t.Errorf("expired: stderr %q", errs)
	}

	// No server: exit 1, says where it tried.
	h.vars["RLSCHED_SERVER"] = "http://127.0.0.1:1"
	_, errs = h.mustRun(1, "ls")
	if !strings.Contains(errs, "cannot reach http://127.0.0.1:1") || !strings.Contains(errs, "--server") {
		t.Errorf("no server: stderr %q", errs)
	}
}

func TestErrors_GatewayFallbackShape(t *testing.T) {
	h := newHarness(t)
	h.login()
	// Aim at a path the fake does not know: 404 with a plain-text body.
	_, errs := h.mustRun(1, "ls", "--server", h.f.url()+"/nothing-here")
	if !strings.Contains(errs, "HTTP 404") {
		t.Errorf("stderr %q", errs)
	}
}

func TestUsageErrors(t *testing.T) {
	h := newHarness(t)
	f := func(wantErr string, args ...string) {
		t.Helper()
		code, out, errs := h.run(args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, code, errs)
		}
		if out != "" {
			t.Errorf("%v: stdout %q", args, out)
		}
		if !strings.Contains(errs, wantErr) {
			t.Errorf("%v: stderr %q lacks %q", args, errs, wantErr)
		}
	}
	f("unknown command", "frobnicate")
	f("unknown flag --bogus", "ls", "--bogus")
	f("missing argument", "show")
	f("unexpected argument", "show", "a", "b")
	f("invalid run id", "show", "../etc/passwd")
	f("nothing to run", "submit", "--gpus", "1")
	f("not both", "submit", "--algorithm", "ppo", "--", "python3")
	f("empty command", "submit", "--")
	f("put the command to run after --", "submit", "python3", "train.py")
	f("--param wants KEY=VALUE", "submit", "--param", "novalue", "--", "x")
	f("--env wants NAME=VALUE", "submit", "--env", "=1", "--", "x")
	f("invalid --timeout", "submit", "--timeout", "soon", "--", "x")
	f("--episodes and --lr go with --algorithm", "submit", "--episodes", "5", "--", "x")
	f("invalid value", "submit", "--gpus", "two", "--", "x")
	f("needs a value", "submit", "--gpus")
	f("missing -u", "login", "-p", "x")
	f("missing password", "login", "-u", "alice")
	f("too short", "register", "-u", "alice", "-p", "short")
	f("invalid user name", "register", "-u", "a", "-p", "password1")
	f("unknown --status", "ls", "--status", "DONE")
	f("--limit must be 1–500", "ls", "--limit", "0")
	f("invalid server URL", "ls", "--server", "ftp://x")
	f("--follow and --json", "submit", "--follow", "--json", "--", "x")
	f("usage: rlsched logs ID", "logs")
}

func TestHelp(t *testing.T) {
	h := newHarness(t)
	for _, name := range Commands() {
		code, out, errs := h.run(name, "--help")
		if code != 0 || errs != "" {
			t.Errorf("%s --help: exit %d, stderr %q", name, code, errs)
		}
		if !strings.HasPrefix(out, "usage: rlsched "+name) || !strings.Contains(out, "--server URL") {
			t.Errorf("%s --help:\n%s", name, out)
		}
	}
	_, out, _ := h.run("submit", "-h")
	for _, want := range []string{"--param KEY=VALUE", "--timeout SECONDS", "--wait", "-- COMMAND", "examples:"} {
		if !strings.Contains(out, want) {
			t.Errorf("submit --help lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = h.run("login", "--help")
	if !strings.Contains(out, "-u, --username NAME") && !strings.Contains(out, "--username, -u NAME") {
		t.Errorf("login --help:\n%s", out)
	}
}

func TestParamValue(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := jsonString(paramValue(in)); got != want {
			t.Errorf("paramValue(%q) = %s, want %s", in, got, want)
		}
	}
	f("3", `3`)
	f("-2.5", `-2.5`)
	f("1e-4", `1e-4`)
	f("true", `true`)
	f("false", `false`)
	f("True", `"True"`)
	f("1.2.3", `"1.2.3"`)
	f("0x10", `"0x10"`)
	f("NaN", `"NaN"`)
	f(" 3", `" 3"`)
	f("", `""`)
	f("null", `"null"`)
	f(`"q"`, `"\"q\""`)
}

func TestParseTimeout(t *testing.T) {
	for in, want := range map[string]int64{"3600": 3600, "90m": 5400, "1.5s": 2, "2h30m": 9000} {
		if got, err := parseTimeout(in); err != nil || got != want {
			t.Errorf("parseTimeout(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "-5", "-1m", "soon", ""} {
		if _, err := parseTimeout(in); err == nil {
			t.Errorf("parseTimeout(%q) succeeded", in)
		}
	}
}

func TestAge(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for d, want := range map[time.Duration]string{42 * time.Second: "42s", 3*time.Minute + 59*time.Second: "3m",
		5 * time.Hour: "5h", 72 * time.Hour: "3d", -time.Second: "0s"} {
		if got := age(now, now.Add(-d)); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
	if age(now, time.Time{}) != "-" {
		t.Error("zero time")
	}
}

func TestJoinLines(t *testing.T) {
	f := func(lines []string, size int64, want string) {
		t.Helper()
		if got := string(joinLines(lines, size)); got != want {
			t.Errorf("joinLines(%q, %d) = %q, want %q", lines, size, got, want)
		}
	}
	f(nil, 0, "")
	f([]string{"a", "b"}, 4, "a\nb\n")
	f([]string{"a", "b"}, 3, "a\nb")
	f([]string{"a\n", "b\n"}, 4, "a\nb\n")
	f([]string{""}, 1, "\n")
}

func TestSubmit_Resources(t *testing.T) {
	h := newHarness(t)
	h.login()
	h.mustRun(0, "submit", "--cpus", "0.5", "--memory", "16GiB", "--", "python3", "train.py")
	m := h.trainBody()
	if jsonString(m["cpus"]) != "0.5" || jsonString(m["memoryMb"]) != "16384" {
		t.Fatalf("cpus %v memoryMb %v", m["cpus"], m["memoryMb"])
	}
	h.mustRun(0, "submit", "--", "python3", "train.py")
	if m := h.trainBody(); m["cpus"] != nil || m["memoryMb"] != nil {
		t.Fatalf("sent cpus %v memoryMb %v though not asked: the master's defaults apply", m["cpus"], m["memoryMb"])
	}
	f := func(want string, args ...string) {
		t.Helper()
		_, errs := h.mustRun(ExitUsage, append(append([]string{"submit"}, args...), "--", "x")...)
		if !strings.Contains(errs, want) {
			t.Errorf("%v: stderr %q lacks %q", args, errs, want)
		}
	}
	f("--cpus must be a positive", "--cpus", "0")
	f("--cpus must be a positive", "--cpus", "-2")
	f("--cpus must be a positive", "--cpus", "NaN")
	f(`unknown unit "XB"`, "--memory", "16XB")
	f("want a positive size", "--memory", "GiB")
	f("want a positive size", "--memory", "-1GiB")
}

func TestParseMemory(t *testing.T) {
	f := func(in string, want int64) {
		t.Helper()
		got, err := parseMemory(in)
		if err != nil || got != want {
			t.Errorf("parseMemory(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	f("16GiB", 16384)
	f("16G", 16384)
	f("16gb", 16384)
	f("1.5 GiB", 1536)
	f("512MiB", 512)
	f("512MB", 512)
	f("4096", 4096)
	f("1TiB", 1<<20)
	f("100KiB", 1) // rounded up to whole MiB
}
