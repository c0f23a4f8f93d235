package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// tourBlock is a fenced code block of the README's tour.
type tourBlock struct {
	line  int    // README line of its opening fence
	lang  string // sh or python
	lines []string
	// skip says why the whole block is not run; skipLines why the lines
	// holding a key are not (both from <!-- tour: ... --> comments).
	skip      string
	skipLines map[string]string
}

// tourMark is a directive for the tour test, an HTML comment right above
// a block (so invisible on GitHub):
//
//	<!-- tour: skip: WHY -->               the block is not run
//	<!-- tour: skip-line "TEXT": WHY -->   its lines holding TEXT are not run
var tourMark = regexp.MustCompile(`^<!-- tour: (skip|skip-line "([^"]+)"): (.+?) -->$`)

// readTour returns the code blocks of the README's "A five-minute tour" and
// its subsections, in order.
func readTour(t *testing.T, path string) []tourBlock {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks  []tourBlock
		cur     *tourBlock
		pending = tourBlock{skipLines: map[string]string{}}
		in      bool
	)
	for i, line := range strings.Split(string(b), "\n") {
		n := i + 1
		switch {
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, line)
		case strings.HasPrefix(line, "## "):
			in = line == "## A five-minute tour"
		case !in:
		case strings.HasPrefix(line, "<!-- tour:"):
			m := tourMark.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("README.md:%d: %q: want <!-- tour: skip: WHY --> or <!-- tour: skip-line \"TEXT\": WHY -->", n, line)
			}
			if m[2] == "" {
				pending.skip = m[3]
			} else {
				pending.skipLines[m[2]] = m[3]
			}
		case strings.HasPrefix(line, "```"):
			bl := pending
			bl.line, bl.lang = n, strings.TrimPrefix(line, "```")
			cur = &bl
			pending = tourBlock{skipLines: map[string]string{}}
		}
	}
	if cur != nil {
		t.Fatalf("README.md:%d: a code block is not closed", cur.line)
	}
	for _, bl := range blocks {
		for key := range bl.skipLines {
			if !strings.Contains(strings.Join(bl.lines, "\n"), key) {
				t.Errorf("README.md:%d: <!-- tour: skip-line %q --> matches no line of the block below it", bl.line, key)
			}
		}
		if bl.lang != "sh" && bl.lang != "python" && bl.skip == "" {
			t.Errorf("README.md:%d: a ```%s block in the tour: the tour test runs sh and python; mark it <!-- tour: skip: WHY -->", bl.line, bl.lang)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if len(blocks) < 5 {
		t.Fatalf("README.md: %d code blocks in the tour; did its heading change?", len(blocks))
	}
	return blocks
}

// tourFixtures are the user's own files the tour names (my_train.py, a
// pipeline file, ...): small stand-ins, in the checkout the tour runs in.
var tourFixtures = map[string]string{
	"my_train.py": `import argparse, json, os
p = argparse.ArgumentParser()
for a in ("--env", "--lr", "--clip", "--seed"):
    p.add_argument(a)
p.parse_known_args()
for step in (1000, 3000):
    print("RLSCHED_METRIC " + json.dumps({"step": step, "episode_reward": step / 100}))
print("FINAL_REWARD:30")
`,
	"eval.py":       "import os\nprint('inputs', os.listdir(os.environ.get('RLSCHED_INPUT_DIR', '.')))\nprint('FINAL_REWARD:1')\n",
	"new.pw":        "bobs-new-password\n",
	"pipeline.json": `{"name": "tour", "steps": [{"name": "train", "command": ["python3", "my_train.py"]}, {"name": "eval", "command": ["python3", "eval.py"], "after": [{"step": "train"}], "inputsFrom": ["train"]}]}` + "\n",
	".gitignore":    "bin/\n.rlsched/\n",
}

var upMasterLine = regexp.MustCompile(`(?m)^\s*master:\s+(\S+)`)

// TestREADMETour runs the README's tour verbatim: `rlsched up` as `make run`
// starts it (on free ports), then every shell block of the tour in one bash,
// in order, in a git checkout holding bin/rlsched and scripts/, as a user
// whose HOME is the test's. It fails on the first command that fails,
// naming the block and showing its output. The only rewrite is of the
// default ports the README names (127.0.0.1:8081 and :8082) to the ones up
// got.
func TestREADMETour(t *testing.T) {
	b := newBed(t)
	for _, tool := range []string{"bash", "git", "python3", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("the tour needs %s: %v", tool, err)
			}
			t.Skipf("the tour needs %s: %v", tool, err)
		}
	}
	blocks := readTour(t, "../README.md")

	ws := filepath.Join(b.Dir, "checkout")
	home := filepath.Join(b.Dir, "home")
	for _, d := range []string{filepath.Join(ws, "bin"), filepath.Join(ws, "scripts"), home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(b.Bin, filepath.Join(ws, "bin", "rlsched")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"train.py", "rlsched.py"} {
		src, err := os.ReadFile(filepath.Join("..", "scripts", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "scripts", f), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range tourFixtures {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	userEnv := append(rig.ServerEnv(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"GIT_AUTHOR_NAME=alice", "GIT_AUTHOR_EMAIL=alice@example.org", "GIT_COMMITTER_NAME=alice", "GIT_COMMITTER_EMAIL=alice@example.org")
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "tour"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = ws, userEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}

	// make run: `up --data-dir .rlsched` from the checkout, as the user.
	// As the user: up records its URL in the user's config dir, where the
	// tour's CLI finds it (RLSCHED_CONFIG_DIR empty: the default one).
	up := b.startUp("up", filepath.Join(ws, ".rlsched"), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "RLSCHED_CONFIG_DIR=")
	mm := upMasterLine.FindStringSubmatch(up.Stdout())
	if mm == nil {
		t.Fatalf("rlsched up printed no master: line:\n%s", up.Stdout())
	}
	if b, err := os.ReadFile(filepath.Join(home, ".config", "rlsched", "up.json")); err != nil || !strings.Contains(string(b), `"`+up.URL+`"`) {
		t.Fatalf("up did not record its URL %s for the CLI: %s %v", up.URL, b, err)
	}
	ports := strings.NewReplacer("http://127.0.0.1:8081", up.URL, "http://127.0.0.1:8082", mm[1])
	t.Cleanup(func() { tourTrackRuns(b, up.URL) })

	sh := exec.Command("bash", "--noprofile", "--norc")
	sh.Dir, sh.Env = ws, userEnv
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	sh.Stdout, sh.Stderr = pw, pw
	in, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
		_ = sh.Wait()
		pw.Close()
	})
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	const done, failed = "__TOUR_BLOCK_DONE__", "__TOUR_COMMAND_FAILED__"
	// Every failing command of a block is reported (ERR), not only the
	// last; a failure inside $(...) shows as its assignment's.
	fmt.Fprintf(in, "set -o pipefail; trap 'echo \"%s exit $? at line $LINENO: $BASH_COMMAND\"' ERR\n", failed)

	ran := 0
	for i, bl := range blocks {
		if bl.skip != "" {
			t.Logf("README.md:%d: not run: %s", bl.line, bl.skip)
			continue
		}
		var keep []string
		for _, l := range bl.lines {
			skipped := false
			for key, why := range bl.skipLines {
				if strings.Contains(l, key) {
					t.Logf("README.md:%d: line not run (%s): %s", bl.line, why, l)
					skipped = true
				}
			}
			if skipped {
				keep = append(keep, "") // keeps $LINENO the block's line
			} else {
				keep = append(keep, l)
			}
		}
		text := ports.Replace(strings.Join(keep, "\n")) + "\n"
		file := filepath.Join(b.Dir, fmt.Sprintf("tour-%02d.%s", i, bl.lang))
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		switch bl.lang {
		case "sh":
			fmt.Fprintf(in, "source %s </dev/null\nprintf '\\n%%s\\n' %s\n", file, done)
		case "python":
			// The README: "put scripts on PYTHONPATH".
			fmt.Fprintf(in, "PYTHONPATH=scripts python3 %s </dev/null\nprintf '\\n%%s\\n' %s\n", file, done)
		}
		var out []string
		fail := ""
		timeout := time.After(150 * time.Second)
	read:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("README.md:%d: the shell ended:\n%s", bl.line, strings.Join(out, "\n"))
				}
				if l == done {
					break read
				}
				if strings.HasSuffix(l, done) { // the block's last line had no newline
					l = strings.TrimSuffix(l, done)
				}
				if strings.HasPrefix(l, failed) && fail == "" {
					fail = strings.TrimSpace(strings.TrimPrefix(l, failed))
				}
				out = append(out, l)
			case <-timeout:
				t.Fatalf("README.md:%d: the block did not end within 150 s:\n%s\n---- its output so far:\n%s",
					bl.line, text, strings.Join(out, "\n"))
			}
		}
		if fail != "" {
			t.Fatalf("README.md:%d: a command of the tour failed (%s)\n---- the block:\n%s---- its output:\n%s",
				bl.line, fail, text, strings.Join(out, "\n"))
		}
		t.Logf("README.md:%d: ok\n%s", bl.line, rig.Tail(strings.Join(out, "\n"), 30))
		ran++
	}
	if ran < 5 {
		t.Fatalf("only %d blocks of the tour ran", ran)
	}
	// What the tour left: the logout at its end forgot the token.
	if _, err := os.Stat(filepath.Join(home, ".config", "rlsched", "credentials.json")); err == nil {
		t.Errorf("the tour ends with logout, yet credentials.json is still there")
	}
}

// tourTrackRuns hands every run of the tour to the bed, so that what is
// left of them is killed with it.
func tourTrackRuns(b *bed, url string) {
	c := rig.NewClient(b.T, url)
	r, err := c.Do("POST", "/api/auth/login", map[string]string{"username": "alice", "password": "a-long-password"})
	if err != nil || r.Status != 200 {
		return
	}
	var ans struct {
		Token string `json:"token"`
	}
	r.JSON(b.T, &ans)
	var list struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	if r, err := c.As(ans.Token).Do("GET", "/api/tasks?limit=500", nil); err == nil && r.Status == 200 {
		r.JSON(b.T, &list)
	}
	for _, it := range list.Items {
		b.track(it.ID)
	}
}
