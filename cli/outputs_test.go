package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
)

// outputsRun is a run with three files: two versions of checkpoint.json
// (attempts 1 and 2), a nested CSV and a 5 MiB model.
func outputsRun(h *harness) (id string, files map[string][]byte) {
	id = h.f.addTask(core.Task{Name: "ppo", Status: core.StatusSucceeded, Attempt: 2})
	model := bytes.Repeat([]byte("weights!"), 5<<20/8)
	files = map[string][]byte{
		"checkpoint.json":   []byte(`{"episode": 200}` + "\n"),
		"logs/progress.csv": []byte("episode,reward\n1,10\n"),
		"ckpt/model.bin":    model,
	}
	h.f.addFile(id, "checkpoint.json", 1, []byte(`{"episode": 50}`+"\n"))
	h.f.addFile(id, "logs/progress.csv", 1, files["logs/progress.csv"])
	h.f.addFile(id, "checkpoint.json", 2, files["checkpoint.json"])
	h.f.addFile(id, "ckpt/model.bin", 2, model)
	return id, files
}

func TestArtifacts_Table(t *testing.T) {
	h := newHarness(t)
	h.login()
	id, files := outputsRun(h)
	out, errs := h.mustRun(0, "artifacts", id)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 4 || !regexp.MustCompile(`^PATH\s+SIZE\s+ATTEMPT\s+MODIFIED\s+SHA256$`).MatchString(lines[0]) {
		t.Fatalf("table:\n%s", out)
	}
	want := []*regexp.Regexp{
		regexp.MustCompile(`^checkpoint\.json\s+17 B\s+2\s+2m\s+` + sha(files["checkpoint.json"])[:12] + `$`),
		regexp.MustCompile(`^logs/progress\.csv\s+20 B\s+1\s+2m\s+[0-9a-f]{12}$`),
		regexp.MustCompile(`^ckpt/model\.bin\s+5\.0 MiB\s+2\s+2m\s+[0-9a-f]{12}$`),
	}
	for i, re := range want {
		if !re.MatchString(lines[i+1]) {
			t.Errorf("row %d %q does not match %s", i+1, lines[i+1], re)
		}
	}
	if !strings.Contains(errs, "3 files, 5.0 MiB") || !strings.Contains(errs, "rlsched download "+id) {
		t.Errorf("stderr %q", errs)
	}
	// One attempt: its versions.
	out, _ = h.mustRun(0, "artifacts", id, "--attempt", "1")
	if !regexp.MustCompile(`checkpoint\.json\s+16 B\s+1 `).MatchString(out) || strings.Contains(out, "model.bin") {
		t.Errorf("--attempt 1:\n%s", out)
	}
	out, _ = h.mustRun(0, "artifacts", id, "--json")
	if !strings.Contains(out, `"modifiedAt"`) || !strings.Contains(out, `"attempt": 2`) {
		t.Errorf("--json:\n%s", out)
	}
	empty := h.f.addTask(core.Task{Name: "none"})
	out, errs = h.mustRun(0, "artifacts", empty)
	if out != "" || !strings.Contains(errs, "has no files yet") {
		t.Errorf("no files: stdout %q stderr %q", out, errs)
	}
	// Once a run ended, "yet" is wrong: say it left none (issue 32).
	started := time.Now().Add(-time.Minute)
	failed := h.f.addTask(core.Task{Name: "failed", Status: core.StatusFailed, StartedAt: &started})
	if _, errs = h.mustRun(0, "artifacts", failed); !strings.Contains(errs, "ended FAILED and left no files") {
		t.Errorf("no files of a FAILED run: %q", errs)
	}
	if _, errs = h.mustRun(0, "download", failed, "-o", t.TempDir()); !strings.Contains(errs, "ended FAILED and left no files") {
		t.Errorf("download of a FAILED run without files: %q", errs)
	}
	never := h.f.addTask(core.Task{Name: "never", Status: core.StatusCancelled})
	if _, errs = h.mustRun(0, "artifacts", never); !strings.Contains(errs, "ended CANCELLED without starting") {
		t.Errorf("no files of a run that never started: %q", errs)
	}
	for _, args := range [][]string{{"artifacts", id, "--attempt", "0"}, {"artifacts"}, {"download", id, "-o", ""}} {
		if code, _, _ := h.run(args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, ExitUsage)
		}
	}
	if _, errs := h.mustRun(1, "artifacts", "r9999"); !strings.Contains(errs, "not found") {
		t.Errorf("unknown run: %q", errs)
	}
}

func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	got := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&os.ModeSymlink != 0 {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		got[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestDownload_AllAndSome(t *testing.T) {
	h := newHarness(t)
	h.login()
	id, files := outputsRun(h)
	out, errs := h.mustRun(0, "download", id, "-o", "out")
	dir := filepath.Join(h.env.Dir, "out")
	if got := readTree(t, dir); len(got) != 3 || !bytes.Equal(got["checkpoint.json"], files["checkpoint.json"]) ||
		!bytes.Equal(got["ckpt/model.bin"], files["ckpt/model.bin"]) || !bytes.Equal(got["logs/progress.csv"], files["logs/progress.csv"]) {
		t.Fatalf("downloaded tree: %d files", len(got))
	}
	wantOut := filepath.Join(dir, "checkpoint.json") + "\n" + filepath.Join(dir, "logs", "progress.csv") + "\n" + filepath.Join(dir, "ckpt", "model.bin") + "\n"
	if out != wantOut {
		t.Errorf("stdout %q, want %q", out, wantOut)
	}
	if !strings.Contains(errs, "3 files into "+dir+": 3 downloaded (5.0 MiB)") || strings.Contains(errs, "\r") {
		t.Errorf("stderr %q", errs)
	}

	// Again: nothing changed, nothing fetched.
	h.f.mu.Lock()
	before := len(h.f.fileReqs)
	h.f.mu.Unlock()
	_, errs = h.mustRun(0, "download", id, "-o", "out")
	h.f.mu.Lock()
	after := len(h.f.fileReqs)
	h.f.mu.Unlock()
	if after != before || !strings.Contains(errs, "0 downloaded (0 B), 3 already there") {
		t.Errorf("second download: %d file requests, stderr %q", after-before, errs)
	}

	// Some paths, a folder among them, into the current directory; an
	// attempt's own versions.
	h.env.Dir = t.TempDir()
	h.mustRun(0, "download", id, "logs/", "checkpoint.json", "--attempt", "1")
	got := readTree(t, h.env.Dir)
	if len(got) != 2 || string(got["checkpoint.json"]) != `{"episode": 50}`+"\n" || got["logs/progress.csv"] == nil {
		t.Errorf("download of some paths of attempt 1: %v", sortedKeys(got))
	}
	h.f.mu.Lock()
	last := h.f.fileReqs[len(h.f.fileReqs)-1]
	h.f.mu.Unlock()
	if last.attempt != "1" {
		t.Errorf("file request of --attempt 1 sent attempt %q", last.attempt)
	}
	_, errs = h.mustRun(1, "download", id, "nope.txt", "checkpoint.json")
	if !strings.Contains(errs, `no file "nope.txt"`) {
		t.Errorf("unknown path: %q", errs)
	}
}

func TestDownload_ResumesAfterABreak(t *testing.T) {
	h := newHarness(t)
	h.login()
	id, files := outputsRun(h)
	model := files["ckpt/model.bin"]
	h.f.mu.Lock()
	h.f.cutFile, h.f.cutAt = "ckpt/model.bin", 3<<20+17
	h.f.mu.Unlock()
	_, errs := h.mustRun(1, "download", id, "ckpt/model.bin", "-o", "out")
	if !strings.Contains(errs, "run the command again to resume") {
		t.Fatalf("broken download: %q", errs)
	}
	part := filepath.Join(h.env.Dir, "out", "ckpt", "model.bin"+partSuffix)
	if b, err := os.ReadFile(part); err != nil || !bytes.Equal(b, model[:3<<20+17]) {
		t.Fatalf("partial file: %d bytes, %v", len(b), err)
	}
	if _, err := os.Stat(filepath.Join(h.env.Dir, "out", "ckpt", "model.bin")); !os.IsNotExist(err) {
		t.Fatalf("an incomplete download took the file's name: %v", err)
	}
	h.mustRun(0, "download", id, "ckpt/model.bin", "-o", "out")
	if b, _ := os.ReadFile(filepath.Join(h.env.Dir, "out", "ckpt", "model.bin")); !bytes.Equal(b, model) {
		t.Fatalf("resumed file differs (%d bytes)", len(b))
	}
	if _, err := os.Stat(part); !os.IsNotExist(err) {
		t.Errorf("partial file left: %v", err)
	}
	h.f.mu.Lock()
	last := h.f.fileReqs[len(h.f.fileReqs)-1]
	h.f.mu.Unlock()
	if last.rng != "bytes=3145745-" || last.ifRange != `"`+sha(model)+`"` {
		t.Errorf("resume sent Range %q If-Range %q", last.rng, last.ifRange)
	}

	// A partial file of other bytes (the file changed since): If-Range
	// brings the whole file, which replaces it.
	write(t, part, "stale bytes of an older version")
	h.mustRun(0, "download", id, "ckpt/model.bin", "-o", "out2")
	if err := os.Rename(part, filepath.Join(h.env.Dir, "out2", "ckpt", "model.bin"+partSuffix)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(h.env.Dir, "out2", "ckpt", "model.bin")); err != nil {
		t.Fatal(err)
	}
	h.mustRun(0, "download", id, "ckpt/model.bin", "-o", "out2")
	if b, _ := os.ReadFile(filepath.Join(h.env.Dir, "out2", "ckpt", "model.bin")); !bytes.Equal(b, model) {
		t.Fatalf("download over a stale partial file differs (%d bytes)", len(b))
	}
}

func TestDownload_ChecksumMismatch(t *testing.T) {
	h := newHarness(t)
	h.login()
	id, _ := outputsRun(h)
	h.f.mu.Lock()
	h.f.corrupt = true
	h.f.mu.Unlock()
	_, errs := h.mustRun(1, "download", id, "checkpoint.json", "-o", "out")
	if !strings.Contains(errs, "checksum mismatch") {
		t.Errorf("stderr %q", errs)
	}
	if got := readTree(t, filepath.Join(h.env.Dir, "out")); len(got) != 0 {
		t.Errorf("files left after a mismatch: %v", sortedKeys(got))
	}
}

func TestDownload_NeverWritesOutsideTheFolder(t *testing.T) {
	h := newHarness(t)
	h.login()
	id := h.f.addTask(core.Task{Name: "evil"})
	for _, p := range []string{"../escaped", "a/../../escaped2", "/tmp/abs", "./dot", "a//b", "link/inside", "ok.txt", "x" + partSuffix} {
		h.f.addFile(id, p, 1, []byte("pwned "+p))
	}
	base := t.TempDir()
	h.env.Dir = filepath.Join(base, "work")
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	// A symlink already in the folder that points out of it.
	if err := os.MkdirAll(filepath.Join(h.env.Dir, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(h.env.Dir, "out", "link")); err != nil {
		t.Fatal(err)
	}
	out, errs := h.mustRun(1, "download", id, "-o", "out")
	if out != filepath.Join(h.env.Dir, "out", "ok.txt")+"\n" {
		t.Errorf("stdout %q", out)
	}
	for _, want := range []string{`refusing file "../escaped"`, `"a/../../escaped2"`, `"/tmp/abs"`, `"./dot"`, `"a//b"`, "cannot download link/inside", "7 failed"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	got := readTree(t, base)
	if len(got) != 1 || got["work/out/ok.txt"] == nil {
		t.Errorf("files written: %v", sortedKeys(got))
	}
	if _, err := os.Stat("/tmp/abs"); err == nil {
		if b, _ := os.ReadFile("/tmp/abs"); strings.HasPrefix(string(b), "pwned") {
			t.Error("wrote /tmp/abs")
		}
	}
}

func TestDownload_ProgressOnATerminal(t *testing.T) {
	h := newHarness(t)
	h.login()
	id, _ := outputsRun(h)
	h.env.ttyErr = true
	_, errs := h.mustRun(0, "download", id, "-o", "out")
	if !strings.Contains(errs, "\r\x1b[Kckpt/model.bin [") || !strings.Contains(errs, "100% 5.0 MiB / 5.0 MiB") {
		t.Errorf("no progress bar for the 5 MiB file:\n%q", errs)
	}
	if strings.Contains(errs, "checkpoint.json [") {
		t.Errorf("a progress bar for a small file:\n%q", errs)
	}
}

func TestBadArtifactPath(t *testing.T) {
	for _, p := range []string{"a", "a/b/c.json", "ünï/ç", "a b", ".hidden", "a..b"} {
		if why := badArtifactPath(p); why != "" {
			t.Errorf("badArtifactPath(%q) = %q, want ok", p, why)
		}
	}
	for _, p := range []string{"", "/a", "..", "../a", "a/..", "a/./b", "a//b", "a/", "a\x00b", strings.Repeat("a", 1025), "\xff", "x" + partSuffix} {
		if why := badArtifactPath(p); why == "" {
			t.Errorf("badArtifactPath(%q) accepted", p)
		}
	}
}

// A run that ended without starting has no output to read: the summary
// points at show (its error says why), not at an empty log (issue 32).
func TestSummary_NeverStarted(t *testing.T) {
	var errb bytes.Buffer
	inv := &invocation{env: Env{Stderr: &errb}.withDefaults()}
	inv.summary(core.Task{ID: "r1", Status: core.StatusCancelled, Error: "dependency r0 FAILED"}, time.Second)
	if s := errb.String(); !strings.Contains(s, "never started; `rlsched show r1`") || strings.Contains(s, "rlsched logs") {
		t.Errorf("never started: %q", s)
	}
	errb.Reset()
	started := time.Now()
	inv.summary(core.Task{ID: "r2", Status: core.StatusFailed, StartedAt: &started}, time.Second)
	if s := errb.String(); !strings.Contains(s, "rlsched logs r2") {
		t.Errorf("failed after starting: %q", s)
	}
}
