package scripts

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// proc is a running python3 whose stdout lines are collected as they come.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr bytes.Buffer
	exited chan error

	mu      sync.Mutex
	lines   []string
	step    int           // the last metric step printed
	changed chan struct{} // closed and replaced at every line
}

// startPy starts python3 with args; the process is killed when the test ends.
func startPy(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	t.Cleanup(cancel)
	p := &proc{t: t, cmd: exec.CommandContext(ctx, python3(t), args...), exited: make(chan error, 1), changed: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.add(sc.Text())
		}
	}()
	go func() {
		<-readDone // all reads finish before Wait closes the pipe
		p.exited <- p.cmd.Wait()
	}()
	return p
}

func (p *proc) add(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines = append(p.lines, line)
	if rest, ok := strings.CutPrefix(line, "RLSCHED_METRIC "); ok {
		var m metricLine
		if json.Unmarshal([]byte(rest), &m) == nil && m.Step != nil {
			p.step = *m.Step
		}
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *proc) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitStep waits until the run has printed the metric line of step n.
func (p *proc) waitStep(n int) {
	p.t.Helper()
	deadline := time.After(time.Minute)
	for {
		p.mu.Lock()
		step, changed := p.step, p.changed
		p.mu.Unlock()
		if step >= n {
			return
		}
		select {
		case <-changed:
		case err := <-p.exited:
			p.t.Fatalf("exited before metric step %d: %v\nstdout:\n%s\nstderr:\n%s", n, err, tail(p.text(), 2000), p.stderr.String())
		case <-deadline:
			p.t.Fatalf("no metric step %d within a minute\nstdout:\n%s", n, tail(p.text(), 2000))
		}
	}
}

// signal sends sig and waits (3 s at most) for the exit, returning its code.
func (p *proc) signal(sig syscall.Signal) int {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
	var werr error
	select {
	case werr = <-p.exited:
	case <-time.After(3 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		p.t.Fatalf("no exit within 3s of %v\nstdout tail:\n%s", sig, tail(p.text(), 2000))
	}
	var ee *exec.ExitError
	if !errors.As(werr, &ee) {
		p.t.Fatalf("exit %v after %v", werr, sig)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

func TestTrainSIGTERM(t *testing.T) {
	t.Parallel()
	train := scriptPath(t, "train.py")
	for _, algo := range []string{"REINFORCE", "PPO"} {
		t.Run(algo, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			p := startPy(t, pyEnv(dir), "-u", train, "--algo", algo, "--episodes", "1000000")
			p.waitStep(12)
			sent := time.Now()
			if code := p.signal(syscall.SIGTERM); code != 143 {
				t.Fatalf("exit %d after SIGTERM, want 143\nstderr:\n%s", code, p.stderr.String())
			}
			took := time.Since(sent)
			out := p.text()
			if !strings.Contains(out, "SIGTERM") || !strings.Contains(out, "checkpoint saved") {
				t.Errorf("no line reporting the SIGTERM checkpoint:\n%s", tail(out, 2000))
			}
			if strings.Contains(out, "FINAL_REWARD:") {
				t.Errorf("a terminated run printed FINAL_REWARD")
			}
			// The last point between two updates: at most a PPO batch (4)
			// behind the last episode printed.
			c := readCheckpoint(t, dir)
			p.mu.Lock()
			last := p.step
			p.mu.Unlock()
			if c.Algo != algo || c.Episode < 12-4 || c.Episode > last {
				t.Errorf("checkpoint algo %q episode %d, want %s and 8..%d", c.Algo, c.Episode, algo, last)
			}
			if m, _ := filepath.Glob(filepath.Join(dir, ".*")); len(m) > 0 {
				t.Errorf("temporary files left in the output dir: %v", m)
			}
			t.Logf("%s: exited %v after SIGTERM, checkpoint at episode %d of %d printed", algo, took.Round(time.Millisecond), c.Episode, last)
		})
	}
}

// parseRunFrom is parseRun for a run whose metric steps start at first
// (a resumed run): it returns the rewards of steps first, first+1, ...
func parseRunFrom(t *testing.T, stdout string, first int) (rewards []float64, final float64) {
	t.Helper()
	var shifted []string
	for _, line := range strings.Split(stdout, "\n") {
		if rest, ok := strings.CutPrefix(line, "RLSCHED_METRIC "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(rest), &m); err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			step, _ := m["step"].(float64)
			if int(step) < first {
				t.Fatalf("metric step %v of a run resumed at episode %d", step, first-1)
			}
			m["step"] = int(step) - first + 1
			b, _ := json.Marshal(m)
			line = "RLSCHED_METRIC " + string(b)
		}
		shifted = append(shifted, line)
	}
	return parseRun(t, strings.Join(shifted, "\n"))
}

// TestTrainResume: a run stopped by SIGTERM, or killed outright, continues
// from its checkpoint under RLSCHED_RESUME=1: "resumed from episode K",
// metric steps from K+1, and the very rewards and final reward of a run
// that was never stopped.
func TestTrainResume(t *testing.T) {
	t.Parallel()
	train := scriptPath(t, "train.py")
	const episodes = 60
	for _, algo := range []string{"REINFORCE", "PPO"} {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			t.Run(algo+"/"+sig.String(), func(t *testing.T) {
				t.Parallel()
				args := []string{"-u", train, "--algo", algo, "--episodes", strconv.Itoa(episodes), "--seed", "3"}
				ref := runPy(t, pyEnv(t.TempDir()), args...)
				if ref.code != 0 {
					t.Fatalf("reference run: exit %d: %s", ref.code, ref.stderr)
				}
				want, wantFinal := parseRun(t, ref.stdout)

				dir := t.TempDir()
				// A slower run (a long first episode would do too): stop it at step 25.
				p := startPy(t, pyEnv(dir), append(args[:len(args):len(args)], "--episodes", "1000000")...)
				p.waitStep(25)
				p.signal(sig)
				c := readCheckpoint(t, dir)
				p.mu.Lock()
				last := p.step
				p.mu.Unlock()
				// SIGKILL leaves the last checkpoint written: at most 10
				// episodes old (CHECKPOINT_EVERY).
				if c.Episode > last || c.Episode < 25-10 {
					t.Fatalf("checkpoint at episode %d after %v at step %d", c.Episode, sig, last)
				}
				if c.Episode >= episodes {
					t.Fatalf("checkpoint at episode %d, past the %d of the resumed run", c.Episode, episodes)
				}

				r := runPy(t, pyEnv(dir, "RLSCHED_RESUME=1"), args...)
				if r.code != 0 {
					t.Fatalf("resumed run: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
				}
				if !strings.Contains(r.stdout, fmt.Sprintf("resumed from episode %d\n", c.Episode)) {
					t.Errorf("no line \"resumed from episode %d\":\n%s", c.Episode, tail(r.stdout, 1000))
				}
				got, final := parseRunFrom(t, r.stdout, c.Episode+1)
				if len(got) != episodes-c.Episode || !slicesEqual(got, want[c.Episode:]) {
					t.Errorf("resumed rewards differ from an uninterrupted run's after episode %d:\n got %v\nwant %v", c.Episode, got, want[c.Episode:])
				}
				if final != wantFinal {
					t.Errorf("FINAL_REWARD %v, want the uninterrupted run's %v", final, wantFinal)
				}
				if c := readCheckpoint(t, dir); c.Episode != episodes {
					t.Errorf("checkpoint after the resumed run at episode %d, want %d", c.Episode, episodes)
				}
			})
		}
	}
}

// TestTrainResumeBadCheckpoint: a checkpoint that cannot be this run's is
// reported on stderr and the run starts from episode 1 (no crash); without
// RLSCHED_RESUME=1 a checkpoint is not read at all.
func TestTrainResumeBadCheckpoint(t *testing.T) {
	t.Parallel()
	train := scriptPath(t, "train.py")
	args := []string{"-u", train, "--algo", "PPO", "--episodes", "12", "--seed", "1"}
	ref := runPy(t, pyEnv(t.TempDir()), args...)
	want, _ := parseRun(t, ref.stdout)
	good := t.TempDir()
	if r := runPy(t, pyEnv(good), args...); r.code != 0 {
		t.Fatal(r.stderr)
	}
	valid, err := os.ReadFile(filepath.Join(good, "checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) string {
		var m map[string]any
		if err := json.Unmarshal(valid, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	state := func(m map[string]any) map[string]any { return m["state"].(map[string]any) }
	cases := []struct{ name, data, why string }{
		{"not JSON", "{not json", "cannot resume"},
		{"truncated", string(valid[:len(valid)/2]), "cannot resume"},
		{"empty", "", "cannot resume"},
		{"a list", "[1, 2]", "not a JSON object"},
		{"old format", `{"format": "rlsched-cartpole-linear-v1", "algo": "PPO", "episode": 5}`, "format"},
		{"other algorithm", edit(func(m map[string]any) { m["algo"] = "REINFORCE" }), "REINFORCE run's"},
		{"negative episode", edit(func(m map[string]any) { m["episode"] = -4 }), "episode"},
		{"no state", edit(func(m map[string]any) { delete(m, "state") }), "incomplete"},
		{"short weights", edit(func(m map[string]any) { m["weights"].(map[string]any)["value"] = []any{1, 2} }), "malformed"},
		{"NaN", strings.Replace(edit(func(m map[string]any) { state(m)["adam"].(map[string]any)["t"] = "x" }), `"x"`, `NaN`, 1), "not a count"},
		{"bad rng", edit(func(m map[string]any) { state(m)["rng"].(map[string]any)["env"] = []any{3, []any{1, 2}, nil} }), "cannot resume"},
		{"a directory", "", "cannot resume"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "checkpoint.json")
			if tc.name == "a directory" {
				if err := os.Mkdir(path, 0o755); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			r := runPy(t, pyEnv(dir, "RLSCHED_RESUME=1"), args...)
			if tc.name == "a directory" && !strings.Contains(r.stderr, "cannot write the checkpoint "+path) {
				t.Errorf("a checkpoint that cannot be written is not reported:\n%s", r.stderr)
			}
			if r.code != 0 {
				t.Fatalf("exit %d\nstderr:\n%s", r.code, r.stderr)
			}
			if !strings.Contains(r.stderr, "cannot resume from "+path) || !strings.Contains(r.stderr, tc.why) ||
				!strings.Contains(r.stderr, "starting from episode 1") || strings.Contains(r.stderr, "Traceback") {
				t.Errorf("stderr lacks the reason (%q):\n%s", tc.why, r.stderr)
			}
			if strings.Contains(r.stdout, "resumed from") {
				t.Errorf("resumed from a bad checkpoint:\n%s", r.stdout)
			}
			if got, _ := parseRun(t, r.stdout); !slicesEqual(got, want) {
				t.Errorf("a fresh start differs from a first run: %v, want %v", got, want)
			}
		})
	}
	t.Run("no checkpoint", func(t *testing.T) {
		t.Parallel()
		r := runPy(t, pyEnv(t.TempDir(), "RLSCHED_RESUME=1"), args...)
		if r.code != 0 || !strings.Contains(r.stderr, "no checkpoint.json yet") && !strings.Contains(r.stderr, "RLSCHED_RESUME=1 but no") {
			t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
		}
		if got, _ := parseRun(t, r.stdout); !slicesEqual(got, want) {
			t.Errorf("rewards %v, want %v", got, want)
		}
	})
	t.Run("not asked to resume", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "checkpoint.json"), valid, 0o644); err != nil {
			t.Fatal(err)
		}
		r := runPy(t, pyEnv(dir, "RLSCHED_RESUME="), args...)
		if r.code != 0 || strings.Contains(r.stdout, "resumed from") {
			t.Fatalf("exit %d, stdout:\n%s", r.code, r.stdout)
		}
		if got, _ := parseRun(t, r.stdout); !slicesEqual(got, want) {
			t.Errorf("rewards %v, want %v", got, want)
		}
	})
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

// clientUnitProg checks the parts of rlsched.Client that need no master: the
// error type, how arguments become bodies and queries, where a download may
// write, the requests of compare and of the scheduling-policy calls (against
// a stand-in server), and what an unreachable server gives. It prints OK at the end.
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
b = rlsched._sweep_body({"base": {"max_retries": 1}, "method": "tpe", "max_parallel": 4, "random": {"lr_x": {"dist": "uniform", "min": 0, "max": 1}},
                          "early_stop": {"method": "asha", "min_steps": 100, "reduction_factor": 3}})
check(b == {"base": {"maxRetries": 1}, "method": "tpe", "maxParallel": 4, "random": {"lr_x": {"dist": "uniform", "min": 0, "max": 1}},
            "earlyStop": {"method": "asha", "minSteps": 100, "reductionFactor": 3}}, "sweep body: %r" % (b,))

# A run's memory as a size; cpus as it is.
check(rlsched._run_body({"cpus": 0.5, "memory": "16GiB"}) == {"cpus": 0.5, "memoryMb": 16384}, "memory 16GiB")
check(rlsched._run_body({"memory": "1.5 G"}) == {"memoryMb": 1536} and rlsched._run_body({"memory": 2048}) == {"memoryMb": 2048}, "memory sizes")
check(rlsched._run_body({"memory_mb": 300}) == {"memoryMb": 300}, "memory_mb")
# Where a run may go (issue 28): a fraction, GPU memory as a size, types, labels.
check(rlsched._run_body({"gpus": 0.25, "gpu_memory": "10GiB", "gpu_type": ["A100"], "constraints": {"!pool": "x"}}) ==
      {"gpus": 0.25, "gpuMemoryMb": 10240, "gpuType": ["A100"], "constraints": {"!pool": "x"}}, "placement fields")
# A multi-node group (issue 29): nodes as it is, gpus per member.
check(rlsched._run_body({"nodes": 4, "gpus": 8}) == {"nodes": 4, "gpus": 8}, "nodes")
try:
    rlsched._run_body({"gpu_memory": "lots"})
    check(False, "gpu_memory lots accepted")
except ValueError as e:
    check("gpu_memory" in str(e), "gpu_memory error names the field: %s" % e)
for bad in ["16XB", "GiB", "-1GiB", True]:
    try:
        rlsched._run_body({"memory": bad})
        check(False, "memory %r accepted" % (bad,))
    except ValueError as e:
        check("memory" in str(e), "memory error names the field: %s" % e)

# A run's Python environment (issue 27).
check(rlsched._run_body({"requirements": "exp/requirements.txt"}) == {"python": {"requirements": "exp/requirements.txt"}}, "requirements")
check(rlsched._run_body({"venv": "/shared/envs/x"}) == {"python": {"venv": "/shared/envs/x"}}, "venv")
check(rlsched._run_body({"python": {"venv": "/v"}}) == {"python": {"venv": "/v"}}, "python as given")
for bad in [{"requirements": "r.txt", "venv": "/v"}, {"venv": "/v", "python": {"venv": "/w"}}]:
    try:
        rlsched._run_body(bad)
        check(False, "%r accepted" % (bad,))
    except ValueError as e:
        check("not both" in str(e), "python env error: %s" % e)

# A run's container image (issue 27) passes as given.
check(rlsched._run_body({"image": "pytorch/pytorch:2.3.0"}) == {"image": "pytorch/pytorch:2.3.0"}, "image")

# Filters as a query string.
q = rlsched._query({"status": "SUCCEEDED", "project": "a b", "user": None, "created_after": datetime.datetime(2026, 1, 2, 3, 4, 5), "tag": ["x", "y"], "limit": 5},
                   {"lr": 0.001, "algo": "PPO", "norm": True})
check(q == "createdAfter=2026-01-02T03%3A04%3A05Z&limit=5&project=a+b&status=SUCCEEDED&tag=x%2Cy&param.algo=PPO&param.lr=0.001&param.norm=true", "query: " + q)

# download refuses a path that could leave the target folder, before any request.
d = tempfile.mkdtemp()
for bad in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "a/", "a\x00b",
            "..\\x", "a\\..\\..\\x", "C:\\x", "C:x", "c:/x", "\\\\host\\share\\x", "a/C:x"]:
    try:
        rlsched._artifact_target(bad, d)
        check(False, "artifact path %r accepted" % bad)
    except ValueError:
        pass
check(rlsched._artifact_target("ckpt/model.pt", d) == os.path.join(d, "ckpt", "model.pt"), "into a directory")
check(rlsched._artifact_target("ckpt/model.pt", os.path.join(d, "m.pt")) == os.path.join(d, "m.pt"), "to a file")

# The sha256 an artifact's ETag names, quoted, weak or bare; nothing else.
sha = "ab" * 32
check(rlsched._etag_sha256('"%s"' % sha) == sha and rlsched._etag_sha256('W/"%s"' % sha.upper()) == sha and rlsched._etag_sha256(sha) == sha, "etag sha256")
check(rlsched._etag_sha256('"abc"') == "" and rlsched._etag_sha256("") == "" and rlsched._etag_sha256('"%s"' % ("zz" * 32)) == "", "etag without a sha256")

# download checks the bytes against the ETag's sha256 and writes nothing on a mismatch.
import hashlib, http.server, json, threading, urllib.parse
body = b'{"episode": 30}\n'
compare_answer = {"groups": [{"key": {"lr": 0.001}, "name": "0.001", "n": 10,
                              "stats": {"iqm": {"value": 1.5, "ci": [1.0, 2.0]}}}],
                  "improvement": {"a": "0.001", "b": "0.01", "value": 0.75, "ci": [0.5, 0.9]}}
seen = []
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        seen.append(self.path)
        if self.path.startswith("/api/compare?"):
            self.answer(json.dumps(compare_answer).encode(), "application/json", None)
            return
        tag = hashlib.sha256(body).hexdigest() if "good" in self.path else "0" * 64
        self.answer(body, None, '"%s"' % tag)
    def answer(self, b, ctype, etag):
        self.send_response(200)
        if ctype:
            self.send_header("Content-Type", ctype)
        if etag:
            self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
c = rlsched.Client("http://127.0.0.1:%d" % srv.server_address[1], token="t")
d = tempfile.mkdtemp()
got = c.download("r1", "ckpt/good.json", d, attempt=2)
check(got == os.path.join(d, "ckpt", "good.json") and open(got, "rb").read() == body, "download: %s" % got)
check(seen[-1] == "/api/tasks/r1/artifacts/ckpt/good.json?attempt=2", "download path: %s" % seen[-1])

# compare: by and task as param.NAME, lists joined by commas, improve as A:B,
# the filters of runs() beside them; the answer as it came.
got = c.compare(sweep="s1", by=["lr", "param.batch"], task="env", metric="episode_reward", stat=["iqm", "mean"],
                reps=500, ci=0.9, seed=7, profile=[0.5, 1.0], improve=("0.001", "0.01"), normalize="minmax", min=-1, max=0)
check(got == compare_answer, "answer: %r" % (got,))
path, _, query = seen[-1].partition("?")
q = dict(urllib.parse.parse_qsl(query))
check(path == "/api/compare", "path: " + path)
want = {"sweep": "s1", "by": "param.lr,param.batch", "task": "param.env", "metric": "episode_reward", "stat": "iqm,mean",
        "reps": "500", "ci": "0.9", "seed": "7", "profile": "0.5,1.0", "improve": "0.001:0.01", "normalize": "minmax",
        "min": "-1", "max": "0"}
check(q == want, "query: %r" % (q,))

c.compare(tag="paper", params={"algo": "PPO"}, by="lr,batch", task="tag.env", created_after="2026-01-01T00:00:00Z", improve="a:b",
          normalize="minmax", min={"cartpole": 0, "pendulum": -1600.5}, max=1)
q = dict(urllib.parse.parse_qsl(seen[-1].partition("?")[2]))
check(q == {"tag": "paper", "param.algo": "PPO", "by": "param.lr,param.batch", "task": "tag.env", "createdAfter": "2026-01-01T00:00:00Z", "improve": "a:b",
            "normalize": "minmax", "min": "cartpole=0,pendulum=-1600.5", "max": "1"},
      "filters: %r" % (q,))
try:
    c.download("r1", "bad.json", d)
    check(False, "a download whose bytes do not match its ETag succeeded")
except rlsched.APIError as e:
    check(e.code == "bad_response" and "bad.json" in e.message, "mismatch error: %r" % (e.__dict__,))
check(sorted(os.listdir(d)) == ["ckpt"], "files left after a mismatch: %s" % os.listdir(d))
srv.shutdown()

# The scheduling-policy calls: their methods, paths and bodies, and what they return.
import json
calls = []
answers = {"/api/queue": {"items": [{"id": "r1", "position": 1, "pendingCode": "quota"}]},
           "/api/users/usage": {"items": [{"user": "bob", "usage": 3.5, "quota": {"gpus": 4, "runs": None}}]},
           "/api/admin/quotas": {"items": [{"user": "bob", "gpus": 4, "runs": None}]}}
class P(http.server.BaseHTTPRequestHandler):
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        calls.append((self.command, self.path, body))
        path = self.path.split("?")[0]
        ans = answers.get(path) or dict(body or {}, echo=path)
        data = json.dumps(ans).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    do_GET = do_PUT = do_POST = do_PATCH = answer
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), P)
threading.Thread(target=srv.serve_forever, daemon=True).start()
c = rlsched.Client("http://127.0.0.1:%d" % srv.server_address[1], token="t")
check(c.queue() == answers["/api/queue"]["items"] and calls[-1] == ("GET", "/api/queue", None), "queue: %r" % (calls[-1],))
check(c.queue(limit=20) == answers["/api/queue"]["items"] and calls[-1][1] == "/api/queue?limit=20", "queue(limit=): %r" % (calls[-1],))
u = c.usage()
check(u == [dict(answers["/api/users/usage"]["items"][0], usageGpuHours=3.5 / 3600)] and calls[-1] == ("GET", "/api/users/usage", None), "usage: %r %r" % (u, calls[-1]))
check(c.quotas() == answers["/api/admin/quotas"]["items"] and calls[-1] == ("GET", "/api/admin/quotas", None), "quotas: %r" % (calls[-1],))
got = c.set_notifications("https://hooks.example.org/x", on=["FAILED"])
check(calls[-1] == ("PUT", "/api/auth/me/notifications", {"webhook": "https://hooks.example.org/x", "on": ["FAILED"]}), "set_notifications: %r" % (calls[-1],))
c.notifications()
check(calls[-1][:2] == ("GET", "/api/auth/me/notifications"), "notifications: %r" % (calls[-1],))
c.me()
check(calls[-1][:2] == ("GET", "/api/auth/me"), "me: %r" % (calls[-1],))
c.test_notification()
check(calls[-1][:2] == ("POST", "/api/auth/me/notifications/test"), "test_notification: %r" % (calls[-1],))
c.change_password("old-password", "new-password")
check(calls[-1] == ("PUT", "/api/auth/me/password", {"current": "old-password", "new": "new-password"}), "change_password: %r" % (calls[-1],))
c.new_token()
check(calls[-1][:2] == ("POST", "/api/auth/me/token"), "new_token: %r" % (calls[-1],))
got = c.set_quota("bob smith", gpus=4)
check(calls[-1] == ("PUT", "/api/admin/quotas/bob%20smith", {"gpus": 4, "runs": None}) and got["gpus"] == 4, "set_quota: %r" % (calls[-1],))
c.set_quota("bob", runs=0)
check(calls[-1] == ("PUT", "/api/admin/quotas/bob", {"gpus": None, "runs": 0}), "set_quota runs=0: %r" % (calls[-1],))
got = c.set_priority("r/1", 50)
check(calls[-1] == ("POST", "/api/tasks/r%2F1/priority", {"priority": 50}) and got["priority"] == 50, "set_priority: %r" % (calls[-1],))
got = c.edit("r1", name="ppo", add_tags="paper", remove_tags=["draft", "x"], note="", baseline=False)
check(calls[-1] == ("PATCH", "/api/tasks/r1", {"name": "ppo", "addTags": ["paper"], "removeTags": ["draft", "x"], "note": "", "baseline": False})
      and got["name"] == "ppo", "edit: %r" % (calls[-1],))
c.edit("r1", tags=("a", "b"))
check(calls[-1] == ("PATCH", "/api/tasks/r1", {"tags": ["a", "b"]}), "edit tags=: %r" % (calls[-1],))
srv.shutdown()

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
