package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

// gitRepo makes h.env.Dir a git repository with one commit of train.py
// and returns a function that runs git in it.
func gitRepo(t *testing.T, h *harness) func(args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("git not installed under CI=true")
		}
		t.Skip("git not installed")
	}
	dir := h.env.Dir
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com",
			"-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	write(t, filepath.Join(dir, "train.py"), "lr = 1e-3\nprint(lr)\n")
	write(t, filepath.Join(dir, "weights.bin"), "\x00\x01\x02binary")
	git("add", ".")
	git("commit", "-q", "-m", "init")
	return git
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// trainCode is the code object of the last submission.
func (h *harness) trainCode() map[string]any {
	h.t.Helper()
	c, _ := h.trainBody()["code"].(map[string]any)
	return c
}

func TestSubmit_RecordsGitCode(t *testing.T) {
	h := newHarness(t)
	h.login()
	git := gitRepo(t, h)
	head := git("rev-parse", "HEAD")
	dir := h.env.Dir

	// Clean: the commit, no diff; no remote.
	h.mustRun(0, "submit", "--", "python3", "train.py")
	if got := jsonString(h.trainCode()); got != `{"gitCommit":"`+head+`","gitDirty":false}` {
		t.Errorf("clean tree: code = %s", got)
	}

	// The remote: origin, its credentials stripped; then the branch's
	// upstream remote wins over origin.
	git("remote", "add", "origin", "https://alice:ghp_secret@github.com/lab/rl.git")
	h.mustRun(0, "submit", "--", "python3", "train.py")
	if got := h.trainCode()["gitRemote"]; got != "https://github.com/lab/rl.git" {
		t.Errorf("origin remote = %v", got)
	}
	git("remote", "add", "fork", "git@example.com:alice/rl.git")
	git("config", "branch.main.remote", "fork")
	h.mustRun(0, "submit", "--", "python3", "train.py")
	if got := h.trainCode()["gitRemote"]; got != "git@example.com:alice/rl.git" {
		t.Errorf("upstream remote = %v", got)
	}

	// Dirty: the diff against HEAD, binary files summarised, staged and
	// unstaged changes both.
	write(t, filepath.Join(dir, "train.py"), "lr = 3e-4\nprint(lr)\n")
	write(t, filepath.Join(dir, "weights.bin"), "\x00\x09changed")
	write(t, filepath.Join(dir, "staged.py"), "x = 1\n")
	git("add", "staged.py")
	h.mustRun(0, "submit", "--", "python3", "train.py")
	c := h.trainCode()
	diff, _ := c["diff"].(string)
	if c["gitDirty"] != true || c["gitCommit"] != head {
		t.Errorf("dirty tree: code %v", c)
	}
	for _, want := range []string{"diff --git a/train.py b/train.py", "-lr = 1e-3", "+lr = 3e-4", "+x = 1", "Binary files a/weights.bin and b/weights.bin differ"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}
	if strings.Contains(diff, "changed") {
		t.Errorf("the diff carries a binary file's bytes:\n%s", diff)
	}
	if got := git("diff", "HEAD", "--no-color") + "\n"; diff != got {
		t.Errorf("diff differs from git diff HEAD:\n%s\nwant:\n%s", diff, got)
	}
	h.f.mu.Lock()
	enc := h.f.trainEnc
	h.f.mu.Unlock()
	if enc != "" {
		t.Errorf("a small submission went with Content-Encoding %q", enc)
	}

	// Only untracked files: dirty, no diff, a note.
	git("checkout", "-q", "--", "train.py", "weights.bin")
	git("rm", "-q", "--cached", "staged.py")
	h.mustRun(0, "submit", "--", "python3", "train.py")
	c = h.trainCode()
	if c["gitDirty"] != true || c["diff"] != nil || !strings.Contains(c["diffOmitted"].(string), "untracked") {
		t.Errorf("untracked only: code %v", c)
	}

	// A large diff goes gzip-compressed; one over 2 MiB is left out, saying so.
	var big strings.Builder
	for i := 0; big.Len() < 1<<20; i++ {
		big.WriteString(strings.Repeat("x", 60) + " line\n")
	}
	write(t, filepath.Join(dir, "train.py"), big.String())
	h.mustRun(0, "submit", "--", "python3", "train.py")
	h.f.mu.Lock()
	enc, wire := h.f.trainEnc, h.f.trainSize
	h.f.mu.Unlock()
	if d, _ := h.trainCode()["diff"].(string); enc != "gzip" || len(d) < 1<<20 || wire > 1<<20 {
		t.Errorf("1 MiB diff: Content-Encoding %q, %d bytes on the wire, diff of %d bytes", enc, wire, len(d))
	}
	write(t, filepath.Join(dir, "train.py"), big.String()+big.String()+big.String())
	h.mustRun(0, "submit", "--", "python3", "train.py")
	c = h.trainCode()
	if c["diff"] != nil || !strings.Contains(c["diffOmitted"].(string), "over the 2 MiB limit") {
		t.Errorf("3 MiB diff: code has diff %v, diffOmitted %v", c["diff"] != nil, c["diffOmitted"])
	}
}

func TestSubmit_NoGitRepository(t *testing.T) {
	h := newHarness(t)
	h.login()
	h.mustRun(0, "submit", "--", "python3", "train.py") // h.env.Dir is a fresh temp dir
	if _, ok := h.trainBody()["code"]; ok {
		t.Errorf("a directory outside git sent code: %v", h.trainBody()["code"])
	}
	// No git at all: the same, and no error.
	h.vars["PATH"] = t.TempDir()
	t.Setenv("PATH", t.TempDir())
	h.mustRun(0, "submit", "--", "python3", "train.py")
}

func TestFitDiff(t *testing.T) {
	// Random-looking text hardly compresses: a 1.9 MiB diff of it cannot
	// fit a request and is left out with a note, the rest kept.
	var b bytes.Buffer
	x := uint64(1)
	for b.Len() < 1900<<10 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b.WriteString(strings.ToUpper(string(rune('a'+x%26))) + string(rune('0'+x/26%10)))
		if x%40 == 0 {
			b.WriteByte('\n')
		}
	}
	req := submitRequest{Command: []string{"x"}, Code: &codeRequest{GitCommit: "c", GitDirty: true, Diff: b.String()}}
	fitDiff(&req)
	if req.Code.Diff != "" || !strings.Contains(req.Code.DiffOmitted, "does not fit a request") || req.Code.GitCommit != "c" {
		t.Fatalf("code after fitDiff: commit %q, diff %d bytes, note %q", req.Code.GitCommit, len(req.Code.Diff), req.Code.DiffOmitted)
	}
	small := submitRequest{Code: &codeRequest{Diff: strings.Repeat("+same line\n", 100000)}}
	fitDiff(&small)
	if small.Code.Diff == "" {
		t.Fatal("fitDiff dropped a diff that compresses well")
	}
	body, gz, err := encodeBody(small)
	if err != nil || !gz || len(body) > maxWireBody {
		t.Fatalf("encodeBody: %d bytes, gzip %v, %v", len(body), gz, err)
	}
	if b, _ := json.Marshal(small); len(b) <= maxWireBody {
		t.Fatalf("test diff too small: %d bytes", len(b))
	}
}

func TestShow_Code(t *testing.T) {
	h := newHarness(t)
	h.login()
	id := h.f.addTask(core.Task{Name: "x", Code: core.CodeInfo{GitCommit: "abc", GitDirty: true, GitRemote: "https://h/r.git", HasDiff: true}})
	out, _ := h.mustRun(0, "show", id)
	for _, want := range []string{"code: abc\n", "gitDirty: true\n", "gitRemote: https://h/r.git\n", "diff: stored: rlsched diff " + id + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	id = h.f.addTask(core.Task{Name: "y", Code: core.CodeInfo{GitCommit: "abc", GitDirty: true, DiffOmitted: "the diff is 3.0 MiB, over the 2 MiB limit"}})
	if out, _ := h.mustRun(0, "show", id); !strings.Contains(out, "diff: not stored: the diff is 3.0 MiB") {
		t.Errorf("show of an omitted diff:\n%s", out)
	}
}

func TestDiff(t *testing.T) {
	h := newHarness(t)
	h.login()
	id := h.f.addTask(core.Task{Name: "x"})
	h.f.mu.Lock()
	h.f.diffs[id] = "diff --git a/x b/x\n+y\n"
	h.f.mu.Unlock()
	if out, _ := h.mustRun(0, "diff", id); out != "diff --git a/x b/x\n+y\n" {
		t.Errorf("diff printed %q", out)
	}
	other := h.f.addTask(core.Task{Name: "y"})
	_, errs := h.mustRun(1, "diff", other)
	if !strings.Contains(errs, "has no stored diff") || !strings.Contains(errs, "rlsched show "+other) {
		t.Errorf("diff of a run without one: %q", errs)
	}
	h.f.addUser("bob", "password2")
	h.vars["RLSCHED_TOKEN"] = tokenFor("bob")
	_, errs = h.mustRun(1, "diff", id)
	if !strings.Contains(errs, "only the run's owner or an admin") || strings.Contains(errs, "may change it") {
		t.Errorf("diff of another user's run: %q", errs)
	}
}

func TestResumeFrom(t *testing.T) {
	h := newHarness(t)
	h.login()
	h.mustRun(0, "submit", "--resume-from", "r0042", "--algorithm", "ppo")
	if got := h.trainBody()["resumeFrom"]; got != "r0042" {
		t.Errorf("submit sent resumeFrom %v", got)
	}
	h.mustRun(0, "submit", "--algorithm", "ppo")
	if _, ok := h.trainBody()["resumeFrom"]; ok {
		t.Error("submit without --resume-from sent resumeFrom")
	}
	id := h.f.addTask(core.Task{Name: "x", Command: []string{"x"}})
	h.mustRun(0, "rerun", id, "--resume-from", id)
	h.f.mu.Lock()
	body := string(h.f.rerunBody)
	h.f.mu.Unlock()
	if body != `{"resumeFrom":"`+id+`"}` {
		t.Errorf("rerun body %s", body)
	}
	for _, args := range [][]string{{"submit", "--resume-from", "../x", "--algorithm", "ppo"}, {"rerun", id, "--resume-from", ""}} {
		if code, _, errs := h.run(args...); code != ExitUsage || !strings.Contains(errs, "invalid --resume-from") {
			t.Errorf("%v: exit %d, %q", args, code, errs)
		}
	}
}
