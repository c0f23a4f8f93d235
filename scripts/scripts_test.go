package scripts

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// runTimeout bounds every python3 run; a default run takes about a second.
const runTimeout = 2 * time.Minute

// python3 returns the interpreter's path. Without one the test is skipped, except under
// CI=true, where it fails: CI must run these tests.
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3 not found under CI=true: %v", err)
		}
		t.Skipf("python3 not found: %v", err)
	}
	return p
}

// scriptPath is the on-disk copy of name; go test runs in this package's folder.
func scriptPath(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

type result struct {
	stdout, stderr string
	code           int
}

// pyEnv is the environment of a run: the test's, with the output directory set and the
// scheduler's variables cleared (later entries win in os/exec).
func pyEnv(outDir string, extra ...string) []string {
	env := append(os.Environ(), "RLSCHED_OUTPUT_DIR="+outDir, "RLSCHED_PARAMS=", "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1")
	return append(env, extra...)
}

func runPy(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python3(t), args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("python3 %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	if ctx.Err() != nil {
		t.Fatalf("python3 %v: no exit within %v", args, runTimeout)
	}
	return result{out.String(), errb.String(), code}
}

type metricLine struct {
	Step          *int     `json:"step"`
	EpisodeReward *float64 `json:"episode_reward"`
}

// parseRun checks the metric lines (one per episode, steps 1..n) and the FINAL_REWARD line
// and returns the episode rewards and the final reward.
func parseRun(t *testing.T, stdout string) (rewards []float64, final float64) {
	t.Helper()
	finals := 0
	for _, line := range strings.Split(stdout, "\n") {
		switch {
		case strings.HasPrefix(line, "RLSCHED_METRIC "):
			var m metricLine
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "RLSCHED_METRIC ")), &m); err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			if m.Step == nil || m.EpisodeReward == nil {
				t.Fatalf("metric line %q lacks step or episode_reward", line)
			}
			if *m.Step != len(rewards)+1 {
				t.Fatalf("metric line %q: step %d, want %d", line, *m.Step, len(rewards)+1)
			}
			if r := *m.EpisodeReward; r < 1 || r > 500 {
				t.Fatalf("metric line %q: episode reward out of [1, 500]", line)
			}
			rewards = append(rewards, *m.EpisodeReward)
		case strings.HasPrefix(line, "FINAL_REWARD:"):
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, "FINAL_REWARD:")), 64)
			if err != nil {
				t.Fatalf("final line %q: %v", line, err)
			}
			final = v
			finals++
		}
	}
	if finals != 1 {
		t.Fatalf("%d FINAL_REWARD lines, want 1; stdout:\n%s", finals, stdout)
	}
	return rewards, final
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

type checkpoint struct {
	Algo    string `json:"algo"`
	Seed    int    `json:"seed"`
	Episode int    `json:"episode"`
	Weights struct {
		Policy [][]float64 `json:"policy"`
	} `json:"weights"`
}

func readCheckpoint(t *testing.T, dir string) checkpoint {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "checkpoint.json"))
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	var c checkpoint
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatalf("checkpoint %q: %v", data, err)
	}
	if len(c.Weights.Policy) != 2 || len(c.Weights.Policy[0]) != 5 || len(c.Weights.Policy[1]) != 5 {
		t.Fatalf("checkpoint policy weights have the wrong shape: %v", c.Weights.Policy)
	}
	return c
}

// TestTrainLearns runs each algorithm with its defaults (200 episodes, seed 0).
func TestTrainLearns(t *testing.T) {
	t.Parallel()
	train := scriptPath(t, "train.py")
	for _, algo := range []string{"REINFORCE", "PPO"} {
		t.Run(algo, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			start := time.Now()
			r := runPy(t, pyEnv(dir), "-u", train, "--algo", algo)
			elapsed := time.Since(start)
			if r.code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			rewards, final := parseRun(t, r.stdout)
			if len(rewards) != 200 {
				t.Fatalf("%d metric lines, want 200", len(rewards))
			}
			if want := mean(rewards[len(rewards)-10:]); math.Abs(final-want) > 1e-3 {
				t.Errorf("FINAL_REWARD %v, want the mean of the last 10 episodes %v", final, want)
			}
			first, last := mean(rewards[:20]), mean(rewards[len(rewards)-20:])
			t.Logf("%s: %v, first 20 episodes %.1f, last 20 %.1f, final %.1f", algo, elapsed.Round(time.Millisecond), first, last, final)
			if !(last > 1.5*first) {
				t.Errorf("no learning: mean of the last 20 episodes %.1f, first 20 %.1f", last, first)
			}
			c := readCheckpoint(t, dir)
			if c.Algo != algo || c.Episode != 200 || c.Seed != 0 {
				t.Errorf("checkpoint algo %q episode %d seed %d, want %s 200 0", c.Algo, c.Episode, c.Seed, algo)
			}
		})
	}
}

func TestTrainArguments(t *testing.T) {
	t.Parallel()
	train := scriptPath(t, "train.py")
	cases := []struct {
		name    string
		args    []string
		code    int
		stderr  []string // substrings of stderr
		outputs bool     // stdout has the metric and final lines
	}{
		{"unknown algorithm", []string{"--algo", "DQN"}, 2, []string{"unknown algorithm", "DQN", "REINFORCE", "PPO"}, false},
		{"zero episodes", []string{"--episodes", "0"}, 2, []string{"--episodes", ">= 1"}, false},
		{"negative episodes", []string{"--episodes", "-3"}, 2, []string{"--episodes"}, false},
		{"non-numeric episodes", []string{"--episodes", "many"}, 2, []string{"--episodes"}, false},
		{"bad lr", []string{"--lr", "-1", "--episodes", "2"}, 2, []string{"--lr"}, false},
		{"unknown params ignored", []string{"--algorithm", "ppo", "--episodes", "3", "--gamma", "0.9", "--batch=4"}, 0, []string{"ignoring unknown arguments", "--gamma"}, true},
		{"lower-case algo", []string{"--algo", "reinforce", "--episodes", "2", "--seed", "5"}, 0, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runPy(t, pyEnv(t.TempDir()), append([]string{"-u", train}, tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, tc.code, r.stdout, r.stderr)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
				}
			}
			if tc.outputs {
				parseRun(t, r.stdout)
			} else if strings.Contains(r.stdout, "RLSCHED_METRIC") {
				t.Errorf("a rejected run printed metrics:\n%s", r.stdout)
			}
		})
	}
}

func TestTrainDeterministic(t *testing.T) {
	t.Parallel()
	train := scriptPath(t, "train.py")
	for _, algo := range []string{"REINFORCE", "PPO"} {
		t.Run(algo, func(t *testing.T) {
			t.Parallel()
			var runs [2][]float64
			for i := range runs {
				r := runPy(t, pyEnv(t.TempDir()), train, "--algo", algo, "--episodes", "30", "--seed", "7")
				if r.code != 0 {
					t.Fatalf("exit %d: %s", r.code, r.stderr)
				}
				runs[i], _ = parseRun(t, r.stdout)
			}
			if len(runs[0]) != 30 || !slicesEqual(runs[0], runs[1]) {
				t.Fatalf("seeded runs differ:\n%v\n%v", runs[0], runs[1])
			}
		})
	}
}

func slicesEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// lineLog collects a process's output lines and closes first when the first metric line
// arrives.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	first chan struct{}
	once  sync.Once
}

func (l *lineLog) add(line string) {
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	if strings.HasPrefix(line, "RLSCHED_METRIC ") {
		l.once.Do(func() { close(l.first) })
	}
}

func (l *lineLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func TestTrainSIGTERM(t *testing.T) {
	t.Parallel()
	train := scriptPath(t, "train.py")
	for _, algo := range []string{"REINFORCE", "PPO"} {
		t.Run(algo, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, python3(t), "-u", train, "--algo", algo, "--episodes", "1000000")
			cmd.Env = pyEnv(dir)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			log := &lineLog{first: make(chan struct{})}
			readDone := make(chan struct{})
			go func() {
				defer close(readDone)
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					log.add(sc.Text())
				}
			}()
			exited := make(chan error, 1)
			go func() {
				<-readDone // all reads finish before Wait closes the pipe
				exited <- cmd.Wait()
			}()

			select {
			case <-log.first:
			case err := <-exited:
				t.Fatalf("exited before the first metric line: %v\nstdout:\n%s\nstderr:\n%s", err, log.text(), stderr.String())
			case <-time.After(time.Minute):
				t.Fatalf("no metric line within a minute\nstdout:\n%s", log.text())
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			sent := time.Now()
			var werr error
			select {
			case werr = <-exited:
			case <-time.After(3 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
				t.Fatalf("no exit within 3s of SIGTERM\nstdout tail:\n%s", tail(log.text(), 2000))
			}
			took := time.Since(sent)
			var ee *exec.ExitError
			if !errors.As(werr, &ee) || ee.ExitCode() != 143 {
				t.Fatalf("exit %v after SIGTERM, want code 143\nstderr:\n%s", werr, stderr.String())
			}
			out := log.text()
			if !strings.Contains(out, "SIGTERM") || !strings.Contains(out, "checkpoint saved") {
				t.Errorf("no line reporting the SIGTERM checkpoint:\n%s", tail(out, 2000))
			}
			if strings.Contains(out, "FINAL_REWARD:") {
				t.Errorf("a terminated run printed FINAL_REWARD")
			}
			c := readCheckpoint(t, dir)
			if c.Algo != algo || c.Episode < 1 {
				t.Errorf("checkpoint algo %q episode %d, want %s and >= 1", c.Algo, c.Episode, algo)
			}
			t.Logf("%s: exited %v after SIGTERM, checkpoint at episode %d", algo, took.Round(time.Millisecond), c.Episode)
		})
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestEmbedded checks that the binary carries both scripts, identical to the files here.
func TestEmbedded(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"train.py", "rlsched.py"} {
		data, err := fs.ReadFile(FS, name)
		if err != nil {
			t.Fatalf("embedded %s: %v", name, err)
		}
		disk, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) == 0 || !bytes.Equal(data, disk) {
			t.Errorf("embedded %s is empty or differs from the file", name)
		}
		if bytes.Contains(data, []byte("placeholder")) {
			t.Errorf("embedded %s is still a placeholder", name)
		}
	}
}

// TestTrainStandalone runs the embedded train.py alone in a folder without rlsched.py and
// without PYTHONPATH: the inline fallback must print the same lines.
func TestTrainStandalone(t *testing.T) {
	t.Parallel()
	data, err := fs.ReadFile(FS, "train.py")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	train := filepath.Join(work, "train.py")
	if err := os.WriteFile(train, data, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYTHONPATH=") && !strings.HasPrefix(kv, "RLSCHED_") {
			env = append(env, kv)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python3(t), train, "--algo", "PPO", "--episodes", "12")
	cmd.Env = env
	cmd.Dir = work // no RLSCHED_OUTPUT_DIR: the checkpoint goes to ./outputs
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("standalone run: %v\n%s", err, out)
	}
	rewards, _ := parseRun(t, string(out))
	if len(rewards) != 12 {
		t.Fatalf("%d metric lines, want 12", len(rewards))
	}
	if c := readCheckpoint(t, filepath.Join(work, "outputs")); c.Episode != 12 {
		t.Errorf("checkpoint episode %d, want 12", c.Episode)
	}
}

// TestHelper exercises rlsched.py through import, as a run started by a worker would.
func TestHelper(t *testing.T) {
	t.Parallel()
	dir := filepath.Dir(scriptPath(t, "rlsched.py"))
	out := filepath.Join(t.TempDir(), "nested", "out")
	prog := `import rlsched, json
rlsched.metric(12, episode_reward=187.5)
rlsched.metric(3, loss=0.25, episode_reward=10)
rlsched.final_reward(195.2)
print("DIR", rlsched.output_dir())
print("PARAMS", json.dumps(rlsched.params(), sort_keys=True))
`
	env := append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="+dir, "RLSCHED_OUTPUT_DIR="+out, `RLSCHED_PARAMS={"episodes": 7, "algo": "PPO"}`)
	r := runPy(t, env, "-c", prog)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := strings.Join([]string{
		`RLSCHED_METRIC {"step": 12, "episode_reward": 187.5}`,
		`RLSCHED_METRIC {"step": 3, "loss": 0.25, "episode_reward": 10}`,
		`FINAL_REWARD:195.2`,
		`DIR ` + out,
		`PARAMS {"algo": "PPO", "episodes": 7}`,
	}, "\n") + "\n"
	if r.stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
	}
	if st, err := os.Stat(out); err != nil || !st.IsDir() {
		t.Errorf("output_dir did not create %s: %v", out, err)
	}

	// Without the variables: ./outputs (created in the working directory) and {}.
	work := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python3(t), "-c", `import rlsched; print(rlsched.output_dir(), rlsched.params())`)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="+dir, "RLSCHED_OUTPUT_DIR=", "RLSCHED_PARAMS=")
	cmd.Dir = work
	got, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(got)) != "./outputs {}" {
		t.Errorf("defaults: %q, want \"./outputs {}\"", got)
	}
	if _, err := os.Stat(filepath.Join(work, "outputs")); err != nil {
		t.Errorf("./outputs not created: %v", err)
	}
}

// clientUnitProg checks the parts of rlsched.Client that need no server: the
// error type, how arguments become bodies and queries, where a download may
// write, and what an unreachable server gives. It prints OK at the end.
const clientUnitProg = `
import datetime, os, socket, sys, tempfile, rlsched

def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)

# APIError carries the API's fields and reads well.
e = rlsched.APIError(404, "not_found", "run r1 not found", "abc")
check(isinstance(e, Exception) and (e.status, e.code, e.message, e.traceId, e.trace_id) == (404, "not_found", "run r1 not found", "abc", "abc"), "APIError fields")
check(str(e) == "404 not_found: run r1 not found (trace abc)", "APIError text: %s" % e)
check(str(rlsched.APIError(None, "unavailable", "down")) == "unavailable: down", "APIError without status")

# An answer's error body; a body that is not one (a proxy's page) still gives a code.
e = rlsched._error_from(400, "hdr", b'{"error":{"code":"bad_request","message":"gpus must be 0..64","traceId":"t1"}}')
check((e.status, e.code, e.message, e.traceId) == (400, "bad_request", "gpus must be 0..64", "t1"), "error body: %r" % (e.__dict__,))
e = rlsched._error_from(403, "hdr", b'{"error":{"code":"forbidden","message":"no"}}')
check(e.traceId == "hdr", "trace id from the header when the body has none")
e = rlsched._error_from(502, "", b"<html>Bad Gateway</html>")
check((e.status, e.code, e.message) == (502, "http_502", "<html>Bad Gateway</html>"), "non-JSON body: %r" % (e.__dict__,))
e = rlsched._error_from(503, "", b"")
check((e.code, e.message) == ("unavailable", "HTTP 503"), "empty body: %r" % (e.__dict__,))
e = rlsched._error_from(404, "", b'{"error":"nope"}')
check(e.code == "not_found", "malformed error body")

# snake_case names become camelCase at the top level only.
check(rlsched._camel("max_retries") == "maxRetries" and rlsched._camel("seedCount") == "seedCount" and rlsched._camel("timeout_seconds") == "timeoutSeconds", "camel")
b = rlsched._body({"max_retries": 2, "params": {"n_steps": 128}, "env": {"MY_VAR": "1"}, "name": None, "seed_count": 3})
check(b == {"maxRetries": 2, "params": {"n_steps": 128}, "env": {"MY_VAR": "1"}, "seedCount": 3}, "body: %r" % (b,))

# Filters as a query string.
q = rlsched._query({"status": "SUCCEEDED", "project": "a b", "user": None, "created_after": datetime.datetime(2026, 1, 2, 3, 4, 5), "tag": ["x", "y"], "limit": 5},
                   {"lr": 0.001, "algo": "PPO", "norm": True})
check(q == "createdAfter=2026-01-02T03%3A04%3A05Z&limit=5&project=a+b&status=SUCCEEDED&tag=x%2Cy&param.algo=PPO&param.lr=0.001&param.norm=true", "query: " + q)

# download refuses a path that could leave the target folder, before any request.
d = tempfile.mkdtemp()
for bad in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "a/", "a\x00b"]:
    try:
        rlsched._artifact_target(bad, d)
        check(False, "artifact path %r accepted" % bad)
    except ValueError:
        pass
check(rlsched._artifact_target("ckpt/model.pt", d) == os.path.join(d, "ckpt", "model.pt"), "into a directory")
check(rlsched._artifact_target("ckpt/model.pt", os.path.join(d, "m.pt")) == os.path.join(d, "m.pt"), "to a file")

# A URL must be http(s); a trailing slash is dropped.
try:
    rlsched.Client("localhost:8081")
    check(False, "a URL without scheme accepted")
except ValueError:
    pass
check(rlsched.Client("http://h:1/").url == "http://h:1", "trailing slash")

# Nothing listens on a port that was just freed: every call raises APIError
# "unavailable", and wait keeps asking until its timeout.
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
c = rlsched.Client("http://127.0.0.1:%d" % port, token="t", timeout=5)
try:
    c.task("r1")
    check(False, "no error from a closed port")
except rlsched.APIError as e:
    check(e.status is None and e.code == "unavailable" and ("127.0.0.1:%d" % port) in e.message, "unreachable: %r" % (e.__dict__,))
try:
    c.wait("r1", timeout=0.3, poll=0.05)
    check(False, "wait returned without a server")
except TimeoutError as e:
    check("r1" in str(e) and "unreachable" in str(e), "wait timeout: %s" % e)
check(c.runs(limit=0) == [], "runs(limit=0) asks nothing")
print("OK")
`

// TestClientUnit runs clientUnitProg against the rlsched.py here;
// e2e/pyclient_test.go tests the client against a real master.
func TestClientUnit(t *testing.T) {
	t.Parallel()
	dir := filepath.Dir(scriptPath(t, "rlsched.py"))
	env := append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="+dir)
	r := runPy(t, env, "-c", clientUnitProg)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "OK" {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}
