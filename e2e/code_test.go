package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// codeScript prints what the run sees of its snapshot.
const codeScript = `import os
print("data:", open("data.txt").read().strip())
print("cwd:", os.path.relpath(os.getcwd(), os.environ["RLSCHED_CODE_DIR"]))
print("helper:", os.path.exists("../helper.py"))
print("new:", os.path.exists("new.py"))
print("uid:", os.getuid())
try:
    os.listdir(os.environ["E2E_HOME"])
    print("home: readable")
except PermissionError:
    print("home: denied")
`

// TestCodeSnapshot (issue 27): a run executes the tree as it was when
// submitted, from a home directory its uid (not the worker's, whose data
// dir is elsewhere) cannot read, started in the submitted subdirectory; the files edited, added and
// deleted after the submission change nothing; a resubmission uploads
// only the changed file; a rerun runs the original tree; rlsched code
// downloads it.
func TestCodeSnapshot(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	b := newBed(t)
	data := filepath.Join(b.Dir, "data")
	m := b.StartMaster("master", rig.MasterOpts{DataDir: data})
	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	cfg := filepath.Join(b.Dir, "cli-alice")
	cli := func(want int, args ...string) string {
		t.Helper()
		out, code := b.cli(cfg, append(args, "--server", m.URL)...)
		if code != want {
			t.Fatalf("rlsched %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
		}
		return out
	}
	cli(0, "login", "-u", "alice", "-p", rig.Password)

	// A git tree in a home directory no one else may enter.
	home := filepath.Join(b.Dir, "home", "alice")
	proj := filepath.Join(home, "proj")
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(proj, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("exp/train.py", codeScript)
	write("exp/data.txt", "submitted bytes\n")
	write("helper.py", "x = 1\n")
	write("big.bin", strings.Repeat("0123456789abcdef", 100<<10)) // 1.6 MiB: two chunks
	write(".gitignore", "outputs/\n")
	write("outputs/ignored.txt", "not code\n")
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = proj
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@x", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@x")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", "exp/train.py", "helper.py", "big.bin", ".gitignore")
	git("commit", "-qm", "first")
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}

	blobs := func() int {
		n := 0
		_ = filepath.WalkDir(filepath.Join(data, "artifacts"), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				n++
			}
			return nil
		})
		return n
	}
	// No worker yet: the run cannot start before the files change.
	id := strings.TrimSpace(cli(0, "submit", "--code", filepath.Join(proj, "exp"), "--env", "E2E_HOME="+home, "--", "python3", "train.py"))
	after1 := blobs()
	write("exp/data.txt", "edited after submit\n")
	if err := os.Remove(filepath.Join(proj, "helper.py")); err != nil {
		t.Fatal(err)
	}
	write("exp/new.py", "added after submit\n")

	// The same tree with one file changed (and one deleted, one added):
	// the new file's blob and the manifest are all it stores.
	id2 := strings.TrimSpace(cli(0, "submit", "--code", filepath.Join(proj, "exp"), "--env", "E2E_HOME="+home, "--", "python3", "train.py"))
	if got := blobs() - after1; got != 3 {
		t.Fatalf("the second submission stored %d blobs; want 3 (data.txt, new.py, the manifest)", got)
	}

	b.StartWorker("worker-w1", m.RPC, rig.WorkerOpts{ID: "w1"})
	m.WaitJoined(t, "w1")
	alice.waitStatus(id, "SUCCEEDED", 60*time.Second)
	text, _ := alice.logText(id)
	if !regexp.MustCompile(`\[rlsched\] code [0-9a-f]{64} \(5 files, 1\.6 MiB\)\n`).MatchString(text) ||
		!strings.Contains(text, "data: submitted bytes\n") || !strings.Contains(text, "cwd: exp\n") ||
		!strings.Contains(text, "helper: True\n") || !strings.Contains(text, "new: False\n") {
		t.Fatalf("the run did not run the submitted tree; log:\n%s", text)
	}
	if strings.Contains(text, "uid: 0\n") || !strings.Contains(text, "home: denied\n") {
		t.Fatalf("the run ran as root, or could read the home directory its code came from; log:\n%s", text)
	}
	alice.waitStatus(id2, "SUCCEEDED", 60*time.Second)
	if text, _ := alice.logText(id2); !strings.Contains(text, "data: edited after submit\n") || !strings.Contains(text, "helper: False\n") ||
		!strings.Contains(text, "new: True\n") {
		t.Fatalf("the second run did not run its own tree; log:\n%s", text)
	}

	// A rerun runs the original tree, wherever the files are now.
	out := cli(0, "rerun", id)
	re := strings.TrimSpace(out)
	alice.waitStatus(re, "SUCCEEDED", 60*time.Second)
	if text, _ := alice.logText(re); !strings.Contains(text, "data: submitted bytes\n") {
		t.Fatalf("the rerun did not run the original tree; log:\n%s", text)
	}

	// rerun --code takes a new snapshot: today's files.
	re2 := strings.TrimSpace(cli(0, "rerun", id, "--code", filepath.Join(proj, "exp")))
	alice.waitStatus(re2, "SUCCEEDED", 60*time.Second)
	if text, _ := alice.logText(re2); !strings.Contains(text, "data: edited after submit\n") || !strings.Contains(text, "cwd: exp\n") {
		t.Fatalf("rerun --code did not run the new tree; log:\n%s", text)
	}

	// The tree comes back as it was submitted, and two runs' trees compare.
	dl := filepath.Join(b.Dir, "dl")
	cli(0, "code", id, "-o", dl)
	if got, err := os.ReadFile(filepath.Join(dl, "exp", "data.txt")); err != nil || string(got) != "submitted bytes\n" {
		t.Fatalf("rlsched code -o: exp/data.txt is %q (%v)", got, err)
	}
	if _, err := os.Stat(filepath.Join(dl, "outputs")); err == nil {
		t.Fatal("rlsched code -o: outputs/ is ignored by .gitignore, yet in the snapshot")
	}
	out = cli(0, "code-diff", id, id2)
	for _, want := range []string{"M exp/data.txt\n", "A exp/new.py\n", "D helper.py\n", "-submitted bytes\n", "+edited after submit\n"} {
		if !strings.Contains(out, want) {
			t.Fatalf("code-diff lacks %q:\n%s", want, out)
		}
	}

	// The Python client packs the same tree into the same hash.
	scripts, err := filepath.Abs(filepath.Join("..", "scripts"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", "-c", `import os, rlsched
c = rlsched.Client(os.environ["E2E_URL"])
c.login("alice", os.environ["E2E_PASSWORD"])
print(c.snapshot(os.environ["E2E_DIR"])["tree"])`)
	cmd.Env = append(b.ServerEnv(), "PYTHONPATH="+scripts, "PYTHONDONTWRITEBYTECODE=1", "E2E_URL="+m.URL,
		"E2E_PASSWORD="+rig.Password, "E2E_DIR="+filepath.Join(proj, "exp"))
	pyOut, err := cmd.CombinedOutput()
	var t2 struct {
		Code struct{ Tree string } `json:"code"`
	}
	if r, err := alice.Do("GET", "/api/tasks/"+id2, nil); err != nil || json.Unmarshal(r.Body, &t2) != nil {
		t.Fatalf("task %s: %v", id2, err)
	}
	if err != nil || strings.TrimSpace(string(pyOut)) != t2.Code.Tree {
		t.Fatalf("the Python client's snapshot: %v %s; want the tree %s", err, pyOut, t2.Code.Tree)
	}
}

// TestCodeSnapshotDamagedBlob: a snapshot file whose stored bytes no
// longer match their sha256 fails the run's start, naming the file, in its
// log and its error; the run never starts on a partial tree.
func TestCodeSnapshotDamagedBlob(t *testing.T) {
	b := newBed(t)
	data := filepath.Join(b.Dir, "data")
	m := b.StartMaster("master", rig.MasterOpts{DataDir: data})
	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	cfg := filepath.Join(b.Dir, "cli-alice")
	if out, code := b.cli(cfg, "login", "-u", "alice", "-p", rig.Password, "--server", m.URL); code != 0 {
		t.Fatal(out)
	}
	src := filepath.Join(b.Dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	const body = "print('must not run')\n"
	if err := os.WriteFile(filepath.Join(src, "train.py"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := b.cli(cfg, "submit", "--code", src, "--server", m.URL, "--", "python3", "train.py")
	if code != 0 {
		t.Fatal(out)
	}
	id := strings.TrimSpace(out)
	sum := hexSHA256([]byte(body))
	blob := filepath.Join(data, "artifacts", "sha256", sum[:2], sum[2:4], sum)
	if err := os.WriteFile(blob, []byte("print('tampered')\n    "), 0o600); err != nil {
		t.Fatal(err)
	}
	b.StartWorker("worker-w1", m.RPC, rig.WorkerOpts{ID: "w1"})
	m.WaitJoined(t, "w1")
	tk := alice.waitTask(id, 60*time.Second, "ended", func(tk task) bool { return terminal[tk.Status] })
	text, _ := alice.logText(id)
	if tk.Status != "FAILED" || !strings.Contains(tk.Error, "train.py") || !strings.Contains(text, "train.py") ||
		strings.Contains(text, "must not run") || strings.Contains(text, "tampered") {
		t.Fatalf("run %v; log:\n%s", tk, text)
	}
}

func hexSHA256(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// retryScript: attempt 1 leaves an output and waits to be killed; a later
// attempt says what it found of the snapshot and of the outputs.
const retryScript = `import os, time
out = os.environ["RLSCHED_OUTPUT_DIR"]
print("attempt", os.environ["RLSCHED_ATTEMPT"], "data:", open("data.txt").read().strip(), flush=True)
if os.environ["RLSCHED_ATTEMPT"] == "1":
    open(os.path.join(out, "ckpt.txt"), "w").write("from attempt 1")
    while True:
        time.sleep(0.2)
print("restored:", open(os.path.join(out, "ckpt.txt")).read(), flush=True)
`

// TestCodeSnapshotRetry: a run whose worker died is retried on another
// worker, with a cold cache, on the same tree (and its outputs restored).
func TestCodeSnapshotRetry(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data")})
	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	cfg := filepath.Join(b.Dir, "cli-alice")
	if out, code := b.cli(cfg, "login", "-u", "alice", "-p", rig.Password, "--server", m.URL); code != 0 {
		t.Fatal(out)
	}
	src := filepath.Join(b.Dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]string{"train.py": retryScript, "data.txt": "submitted bytes\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w1 := b.StartWorker("worker-w1", m.RPC, rig.WorkerOpts{ID: "w1"})
	m.WaitJoined(t, "w1")
	out, code := b.cli(cfg, "submit", "--code", src, "--max-retries", "1", "--server", m.URL, "--", "python3", "train.py")
	if code != 0 {
		t.Fatal(out)
	}
	id := strings.TrimSpace(out)
	b.track(id)
	alice.waitLogContains(id, "attempt 1 data: submitted bytes\n", 60*time.Second)
	// The checkpoint is written after that line: kill w1 once the master
	// holds it, or attempt 2 has nothing to restore.
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		r, _ := alice.Do("GET", "/api/tasks/"+id+"/artifacts", nil)
		return r.Status == 200 && strings.Contains(string(r.Body), `"ckpt.txt"`), "ckpt.txt at the master: " + r.String()
	})
	if err := os.WriteFile(filepath.Join(src, "data.txt"), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w1.Kill(t)
	b.StartWorker("worker-w2", m.RPC, rig.WorkerOpts{ID: "w2"})
	m.WaitJoined(t, "w2")
	tk := alice.waitStatus(id, "SUCCEEDED", time.Duration(taskTTLSeconds+60)*time.Second)
	text, _ := alice.logText(id)
	if tk.Attempt != 2 || !strings.Contains(text, "attempt 2 data: submitted bytes\n") || !strings.Contains(text, "restored: from attempt 1") ||
		len(regexp.MustCompile(`\[rlsched\] code [0-9a-f]{64} \(2 files`).FindAllString(text, -1)) != 2 {
		t.Fatalf("run %v; log:\n%s", tk, text)
	}
}

// TestCodeSnapshotUploadResumes: an upload cut short (here: three of a
// large file's chunks stored, the rest not) is resumed by the next
// submission, which uploads only the blobs still missing and shows its
// progress on stderr for a large tree; the worker runs the file whole,
// from its chunks. Against the disk store and S3 (SeaweedFS). --no-code
// sends no snapshot: the run keeps its workdir.
func TestCodeSnapshotUploadResumes(t *testing.T) {
	for _, backend := range []string{"disk", "s3"} {
		t.Run(backend, func(t *testing.T) {
			b := newBed(t)
			var env []string
			if backend == "s3" {
				env = s3Env(t)
			}
			m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data"), Env: env})
			alice, _ := signup(t, m.URL, "alice", "ADMIN")
			cfg := filepath.Join(b.Dir, "cli-alice")
			if out, code := b.cli(cfg, "login", "-u", "alice", "-p", rig.Password, "--server", m.URL); code != 0 {
				t.Fatal(out)
			}
			src := filepath.Join(b.Dir, "src")
			if err := os.MkdirAll(src, 0o755); err != nil {
				t.Fatal(err)
			}
			// 12 chunks of 1 MiB, each of other bytes: over 8 MiB to upload
			// even without the three stored, so its progress is shown.
			big := make([]byte, 12<<20)
			for i := range big {
				big[i] = byte(i/(1<<20) + i%251)
			}
			if err := os.WriteFile(filepath.Join(src, "weights.bin"), big, 0o644); err != nil {
				t.Fatal(err)
			}
			train := "import hashlib\nprint('weights', hashlib.sha256(open('weights.bin', 'rb').read()).hexdigest())\n"
			if err := os.WriteFile(filepath.Join(src, "train.py"), []byte(train), 0o644); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				chunk := big[i<<20 : (i+1)<<20]
				alice.Must("PUT", "/api/code/blobs/"+hexSHA256(chunk), chunk, 201, nil, "Content-Type", "application/octet-stream")
			}
			out, code := b.cli(cfg, "submit", "--code", src, "--server", m.URL, "--", "python3", "train.py")
			if code != 0 {
				t.Fatal(out)
			}
			if !strings.Contains(out, "uploading code: ") || !regexp.MustCompile(`code [0-9a-f]{12} \(2 files, 12\.0 MiB; uploaded 10 blobs, 9\.0 MiB\)`).MatchString(out) {
				t.Fatalf("the submission's output: want the progress and 10 blobs (9 chunks and train.py) uploaded\n%s", out)
			}
			lastLine := func(s string) string { s = strings.TrimSpace(s); return s[strings.LastIndex(s, "\n")+1:] }
			id := lastLine(out)
			b.StartWorker("worker-w1", m.RPC, rig.WorkerOpts{ID: "w1"})
			m.WaitJoined(t, "w1")
			alice.waitStatus(id, "SUCCEEDED", 60*time.Second)
			if text, _ := alice.logText(id); !strings.Contains(text, "weights "+hexSHA256(big)+"\n") {
				t.Fatalf("the run did not read weights.bin whole; log:\n%s", text)
			}

			out, code = b.cli(cfg, "submit", "--no-code", "--server", m.URL, "--", "true")
			if code != 0 {
				t.Fatal(out)
			}
			nc := lastLine(out)
			var got struct {
				Workdir string `json:"workdir"`
				Code    *struct {
					Tree string `json:"tree"`
				} `json:"code"`
			}
			alice.Must("GET", "/api/tasks/"+nc, nil, 200, &got)
			if got.Workdir != filepath.Join(b.Dir, "cli-cwd") || got.Code != nil && got.Code.Tree != "" {
				t.Fatalf("--no-code: workdir %q, code %+v; want the current directory and no tree", got.Workdir, got.Code)
			}
		})
	}
}

// TestCodeSnapshotUnprivilegedWorker (issue 27's "done when"): a worker
// that is not root, as uid 65534 in a directory tree of its own, runs code
// submitted from a home directory it cannot read: the code comes with the
// run, not from the submitter's file system.
func TestCodeSnapshotUnprivilegedWorker(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and setpriv (util-linux) to start a worker as another uid")
	}
	const uid = 65534
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data")})
	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	cfg := filepath.Join(b.Dir, "cli-alice")
	if out, code := b.cli(cfg, "login", "-u", "alice", "-p", rig.Password, "--server", m.URL); code != 0 {
		t.Fatal(out)
	}
	home := filepath.Join(b.Dir, "home", "alice")
	proj := filepath.Join(home, "proj")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proj, "train.py"), []byte(codeScript), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proj, "data.txt"), []byte("from alice's home\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	out, code := b.cli(cfg, "submit", "--code", proj, "--env", "E2E_HOME="+home, "--server", m.URL, "--", "python3", "train.py")
	if code != 0 {
		t.Fatal(out)
	}
	id := strings.TrimSpace(out)

	// The worker's binary and data dir where uid 65534 reaches them.
	wdir := filepath.Join(b.Dir, "nobody")
	data := filepath.Join(wdir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(b.Bin)
	if err != nil {
		t.Fatal(err)
	}
	nbin := filepath.Join(wdir, "rlsched")
	if err := os.WriteFile(nbin, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, uid, uid); err != nil {
		t.Fatal(err)
	}
	saved := b.Bin
	b.Bin = nbin
	b.StartVia("worker-nobody", []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"},
		b.ServerEnv("WORKER_JOIN_TOKEN="+b.JoinToken, "HOME="+data), rig.WorkerArgs(m.RPC, "nobody", 2, 0, data)...)
	b.Bin = saved
	m.WaitJoined(t, "nobody")
	tk := alice.waitTask(id, 60*time.Second, "ended", func(tk task) bool { return terminal[tk.Status] })
	text, _ := alice.logText(id)
	if tk.Status != "SUCCEEDED" || !strings.Contains(text, "data: from alice's home\n") || !strings.Contains(text, "uid: 65534\n") ||
		!strings.Contains(text, "home: denied\n") {
		t.Fatalf("run %v; want the submitted tree run as uid 65534, which cannot read the home dir; log:\n%s", tk, text)
	}
}
