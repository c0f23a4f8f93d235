package worker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/worker/cgroup"
	"github.com/rlsched/rlsched/worker/isolation"
)

func fastSync(c *Config) { c.ArtifactSync = 50 * time.Millisecond }

// A run's regular files are all stored before its TaskFinished is sent;
// symbolic links (to files or directories outside) and FIFOs are not
// followed or read.
func TestOutputsStoredBeforeTaskFinished(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil) // the default sync (30 s): only the last one runs
	mc := m.next(t)
	script := `set -e
cd "$RLSCHED_OUTPUT_DIR"
echo '{"episode":10}' > checkpoint.json
mkdir -p a/b
head -c 2621440 /dev/zero | tr '\0' 'q' > a/b/big.bin
: > empty
ln -s /etc/passwd passwd
ln -s /etc etc
mkfifo fifo`
	mc.send(&pb.ExecuteTask{TaskId: "t-out", Attempt: 1, Fence: 3, Argv: []string{"sh", "-c", script}})
	mc.started(t, "t-out")
	fin := mc.finished(t, "t-out", 30*time.Second)
	if fin.GetExitCode() != 0 {
		t.Fatalf("run failed: %v, log %q", fin, m.log("t-out", 1))
	}
	// TaskFinished came after the last file's done answer.
	if f := m.file("t-out", 1, "checkpoint.json"); f == nil || string(f.data) != "{\"episode\":10}\n" {
		t.Fatalf("checkpoint.json: %+v", f)
	}
	if f := m.file("t-out", 1, "a/b/big.bin"); f == nil || len(f.data) != 2621440 || bytes.Count(f.data, []byte("q")) != 2621440 {
		t.Fatal("a/b/big.bin not stored whole")
	}
	if f := m.file("t-out", 1, "empty"); f == nil || len(f.data) != 0 {
		t.Fatalf("an empty file: %+v", f)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.files {
		if strings.Contains(k, "passwd") || strings.Contains(k, "etc") || strings.Contains(k, "fifo") {
			t.Fatalf("%s was uploaded: links and FIFOs must not be", k)
		}
	}
	if len(m.files) != 3 {
		t.Fatalf("uploaded %d files, want 3", len(m.files))
	}
}

// A file is sent as soon as the run closes it after writing or renames it
// into its dir, in a directory made after the run began too, long before
// the periodic walk (an hour here) would find it.
func TestOutputsSentWhenWritten(t *testing.T) {
	m := newFakeMaster(t, testToken)
	cfg := startWorker(t, m, func(c *Config) { c.ArtifactSync = time.Hour })
	mc := m.next(t)
	script := `cd "$RLSCHED_OUTPUT_DIR"
echo '{"episode":460}' > ckpt.json.tmp && mv ckpt.json.tmp ckpt.json
while [ ! -e go ]; do sleep 0.02; done
mkdir -p deep/er && echo two > deep/er/b.txt
while [ ! -e go2 ]; do sleep 0.02; done`
	mc.send(&pb.ExecuteTask{TaskId: "t-now", Attempt: 1, Fence: 1, Argv: []string{"sh", "-c", script}})
	mc.started(t, "t-now")
	dir := filepath.Join(cfg.DataDir, "outputs", "t-now", "1")
	arrives := func(rel, want string) {
		t.Helper()
		waitFor(t, 15*time.Second, rel+" at the master while the run runs", func() bool {
			f := m.file("t-now", 1, rel)
			return f != nil && string(f.data) == want
		})
	}
	arrives("ckpt.json", "{\"episode\":460}\n")
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	arrives("deep/er/b.txt", "two\n")
	if err := os.WriteFile(filepath.Join(dir, "go2"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if fin := mc.finished(t, "t-now", 30*time.Second); fin.GetExitCode() != 0 {
		t.Fatalf("run failed: %v", fin)
	}
}

// A file rewritten while the syncs read it is never stored torn: what is
// stored at the end is its final content.
func TestOutputsNeverTorn(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, fastSync)
	mc := m.next(t)
	script := `cd "$RLSCHED_OUTPUT_DIR"
i=0; while [ $i -lt 200 ]; do head -c $(( (i % 7 + 1) * 300000 )) /dev/zero | tr '\0' "$((i % 10))" > state.bin; i=$((i+1)); done
echo final > state.bin`
	mc.send(&pb.ExecuteTask{TaskId: "t-torn", Attempt: 1, Fence: 1, Argv: []string{"sh", "-c", script}})
	mc.started(t, "t-torn")
	mc.finished(t, "t-torn", 60*time.Second)
	if f := m.file("t-torn", 1, "state.bin"); f == nil || string(f.data) != "final\n" || f.changing {
		t.Fatalf("state.bin stored as %+v, want its final content", f)
	}
}

// A file that keeps changing after the run's process ended (a process that
// left its group keeps writing it) is sent as last read, marked changing,
// after finalTries tries; the run's TaskFinished still goes.
func TestOutputsChangingAtTheEnd(t *testing.T) {
	m := newFakeMaster(t, testToken)
	// Without a control group: with one, the writer dies with the run.
	startWorker(t, m, func(c *Config) { c.RunAs, c.ResourceEnforcement = RunAsNone, cgroup.Off })
	mc := m.next(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	script := `cd "$RLSCHED_OUTPUT_DIR"
setsid sh -c 'echo $$ > "$1"; head -c 20000000 /dev/zero | tr "\0" x > grow.txt; touch started; while :; do echo x >> grow.txt; done' sh "$1" </dev/null >/dev/null 2>&1 &
while [ ! -e started ]; do sleep 0.01; done`
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	mc.send(&pb.ExecuteTask{TaskId: "t-grow", Attempt: 1, Fence: 1, Argv: []string{"sh", "-c", script, "sh", pidFile}})
	mc.started(t, "t-grow")
	mc.finished(t, "t-grow", 60*time.Second)
	f := m.file("t-grow", 1, "grow.txt")
	if f == nil || !f.changing || len(f.data) < 20000000 || strings.Trim(string(f.data), "x\n") != "" {
		if f != nil {
			f.data = f.data[:min(len(f.data), 40)]
		}
		t.Fatalf("a file that keeps changing: %+v, want it sent as read and marked changing", f)
	}
}

// An upload cut by a lost connection resumes from what the master acked on
// the next one, and the file arrives whole.
func TestOutputsResumeAfterReconnect(t *testing.T) {
	m := newFakeMaster(t, testToken)
	m.setAck(func(*pb.Hello) *pb.HelloAck {
		return &pb.HelloAck{Session: "s1", HeartbeatIntervalMs: 100, LeaseTtlMs: 30_000, MasterId: "m1", ArtifactWindow: 1 << 20}
	})
	cfg := startWorker(t, m, fastSync)
	mc := m.next(t)
	mc.holdChunksFrom.Store(3 << 20)
	script := `cd "$RLSCHED_OUTPUT_DIR"
head -c 8388608 /dev/urandom > model.bin
while [ ! -e go ]; do sleep 0.02; done`
	mc.send(&pb.ExecuteTask{TaskId: "t-rs", Attempt: 1, Fence: 1, Argv: []string{"sh", "-c", script}})
	mc.started(t, "t-rs")
	waitFor(t, 30*time.Second, "3 MiB of model.bin stored", func() bool { return m.partial("t-rs", 1, "model.bin") >= 3<<20 })
	mc.c.Close()
	mc2 := m.next(t)
	dir := filepath.Join(cfg.DataDir, "outputs", "t-rs", "1")
	want, err := os.ReadFile(filepath.Join(dir, "model.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	mc2.finished(t, "t-rs", 60*time.Second)
	if f := m.file("t-rs", 1, "model.bin"); f == nil || !bytes.Equal(f.data, want) {
		t.Fatal("model.bin did not arrive whole after the reconnect")
	}
}

// A resumed attempt starts with its restored files, owned by its uid, with
// their mtimes, and RLSCHED_RESUME=1; a file whose bytes do not match its
// digest is left out; restored files are not sent back.
func TestRestoreBeforeStart(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, fastSync)
	mc := m.next(t)
	ckpt := []byte(`{"episode":40}`)
	big := bytes.Repeat([]byte("restore!"), 3<<17) // 3 MiB
	m.setRestore("checkpoint.json", ckpt)
	m.setRestore("deep/dir/model.bin", big)
	m.setRestore("bad.bin", []byte("not what the digest says"))
	digest := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	mod := time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)
	files := []*pb.RestoreFile{
		{Path: "bad.bin", Size: 24, Sha256: digest([]byte("something else entirely")), ModifiedUnixNs: mod.UnixNano()},
		{Path: "checkpoint.json", Size: int64(len(ckpt)), Sha256: digest(ckpt), ModifiedUnixNs: mod.UnixNano()},
		{Path: "deep/dir/model.bin", Size: int64(len(big)), Sha256: digest(big), ModifiedUnixNs: mod.UnixNano()},
	}
	script := `cd "$RLSCHED_OUTPUT_DIR"
echo "resume=$RLSCHED_RESUME"
cat checkpoint.json; echo
wc -c < deep/dir/model.bin
[ -e bad.bin ] && echo "bad.bin is there"
[ "$(stat -c %u checkpoint.json)" = "$(id -u)" ] && [ "$(stat -c %u deep/dir)" = "$(id -u)" ] && echo owned
stat -c %Y checkpoint.json
sleep 0.3`
	mc.send(&pb.ExecuteTask{TaskId: "t-res", Attempt: 2, Fence: 5, Argv: []string{"sh", "-c", script}, Resume: true, Restore: files})
	mc.started(t, "t-res")
	mc.finished(t, "t-res", 60*time.Second)
	want := fmt.Sprintf("resume=1\n{\"episode\":40}\n%d\nowned\n%d\n", len(big), mod.Unix())
	if got := m.log("t-res", 2); got != want {
		t.Fatalf("the resumed run printed %q, want %q", got, want)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.files) != 0 {
		t.Fatalf("restored files were sent back: %v", m.files)
	}
}

// An output dir of 100,000 small files: the master keeps its first 10,000
// and refuses the others; each refused file is sent once, the run ends, and
// its TaskFinished goes.
func TestOutputsManySmallFiles(t *testing.T) {
	m := newFakeMaster(t, testToken)
	m.mu.Lock()
	m.maxFiles = 10_000
	m.mu.Unlock()
	startWorker(t, m, nil)
	mc := m.next(t)
	script := `import os
d = os.environ["RLSCHED_OUTPUT_DIR"]
for i in range(100):
    os.mkdir(os.path.join(d, "d%d" % i))
    for j in range(1000):
        with open(os.path.join(d, "d%d" % i, "f%d" % j), "w") as f:
            f.write("x")
`
	mc.send(&pb.ExecuteTask{TaskId: "t-many", Attempt: 1, Fence: 1, Argv: []string{"python3", "-c", script}})
	mc.started(t, "t-many")
	fin := mc.finished(t, "t-many", 5*time.Minute)
	if fin.GetExitCode() != 0 {
		t.Fatalf("run failed: %v, log %q", fin, m.log("t-many", 1))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.files) != 10_000 || m.refusedFiles != 90_000 {
		t.Fatalf("%d files kept and %d refusals, want 10,000 and one refusal for each of the other 90,000", len(m.files), m.refusedFiles)
	}
}

// Once its TaskFinished is acked, a run's output dir goes, and its task's
// dir with it, when the master stored every file; a dir with a file the
// master refused stays (the worker holds the only copy).
func TestOutputsDirRemovedOnceStored(t *testing.T) {
	m := newFakeMaster(t, testToken)
	m.mu.Lock()
	m.maxFiles = 2
	m.mu.Unlock()
	logs := &testutil.SyncBuffer{}
	cfg := startWorker(t, m, loggingTo(t, logs, nil))
	mc := m.next(t)
	run := func(id, script string) string {
		t.Helper()
		mc.send(&pb.ExecuteTask{TaskId: id, Attempt: 1, Fence: 1, Argv: []string{"sh", "-c", script}})
		mc.started(t, id)
		if fin := mc.finished(t, id, 30*time.Second); fin.GetExitCode() != 0 {
			t.Fatalf("%s failed: %v", id, fin)
		}
		dir := filepath.Join(cfg.DataDir, "outputs", id, "1")
		if _, err := os.Stat(filepath.Join(dir, "a")); err != nil {
			t.Fatalf("%s's output dir before the ack: %v", id, err)
		}
		mc.send(&pb.TaskFinishedAck{TaskId: id, Attempt: 1})
		return dir
	}
	dir := run("t-rm", `cd "$RLSCHED_OUTPUT_DIR" && mkdir sub && echo a > a && echo b > sub/b`)
	waitFor(t, 10*time.Second, "the stored run's dirs removed", func() bool {
		_, err := os.Lstat(filepath.Dir(dir))
		return errors.Is(err, fs.ErrNotExist)
	})
	dir = run("t-keep", `cd "$RLSCHED_OUTPUT_DIR" && echo a > a`) // past the master's 2 files
	waitFor(t, 10*time.Second, "the decision to keep", func() bool {
		return strings.Contains(logs.String(), "keeping the run's output dir")
	})
	if b, err := os.ReadFile(filepath.Join(dir, "a")); err != nil || string(b) != "a\n" {
		t.Fatalf("the refused file: %q, %v; want it kept", b, err)
	}
}

// TestOutputsRefuseLinksAndForeignFiles (issue 25): the worker reads
// outputs as root, so a file the run could not read itself never becomes
// an artifact: a hard link to a root-only file (planted by the test, as a
// run could where fs.protected_hardlinks is 0), a symbolic link to it, a
// file of another uid, and the run's own hard-linked pair. The run's log
// names each and says why; an ordinary file still goes.
func TestOutputsRefuseLinksAndForeignFiles(t *testing.T) {
	m := newFakeMaster(t, testToken)
	cfg := isoWorker(t, m, isolation.UIDRange{First: 62080, Last: 62089}, fastSync)
	mc := m.next(t)
	const secret = "root-only-secret-6f1c"
	secretFile := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secretFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	script := `cd "$RLSCHED_OUTPUT_DIR"
echo ok > ok
ln -s "$1" sym
echo mine > "$TMPDIR/mine" && ln "$TMPDIR/mine" mine && ln mine mine2
touch ready
while [ ! -e planted ]; do sleep 0.02; done`
	mc.send(&pb.ExecuteTask{TaskId: "t-links", Attempt: 1, Argv: []string{"sh", "-c", script, "sh", secretFile}})
	mc.started(t, "t-links")
	dir := filepath.Join(cfg.DataDir, "outputs", "t-links", "1")
	waitFor(t, 10*time.Second, "the run's files", func() bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil })
	if err := os.Link(secretFile, filepath.Join(dir, "stolen")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rootfile"), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "planted"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fin := mc.finished(t, "t-links", 30*time.Second)
	log := m.log("t-links", 1)
	if fin.GetExitCode() != 0 {
		t.Fatalf("run: %v\n%s", fin, log)
	}
	if f := m.file("t-links", 1, "ok"); f == nil || string(f.data) != "ok\n" {
		t.Fatalf("the ordinary file: %+v", f)
	}
	m.mu.Lock()
	for k, f := range m.files {
		if (k != "t-links/1/ok" && k != "t-links/1/ready") || strings.Contains(string(f.data), secret) {
			t.Errorf("uploaded %s (%q)", k, f.data)
		}
	}
	m.mu.Unlock()
	for _, want := range []string{
		"[rlsched] not uploading stolen: it has 2 hard links",
		"[rlsched] not uploading mine: it has 3 hard links",
		"[rlsched] not uploading mine2: it has 3 hard links",
		"[rlsched] not uploading sym: a symbolic link (never followed)",
		"[rlsched] not uploading rootfile: it belongs to uid 0, not to the run's uid",
	} {
		if strings.Count(log, want) != 1 {
			t.Errorf("the run's log says %d times %q, want once:\n%s", strings.Count(log, want), want, log)
		}
	}
}

// TestOutputsRefuseHardLinksUnderWorkerUID: a run under the worker's own
// uid keeps its files' owner unchecked, but a hard link is refused all the
// same (it may be to the worker's own key). The links are made last, and
// only the last sync sees them (no close-write, no periodic sync): its
// refusals are in the run's log too.
func TestOutputsRefuseHardLinksUnderWorkerUID(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) { c.RunAs = RunAsNone })
	mc := m.next(t)
	fin, log := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-hard", Attempt: 1,
		Argv: []string{"sh", "-c", `cd "$RLSCHED_OUTPUT_DIR" && echo c > c && echo a > "$TMPDIR/a" && ln "$TMPDIR/a" a && ln a b`}})
	if fin.GetExitCode() != 0 {
		t.Fatalf("run: %v\n%s", fin, log)
	}
	if f := m.file("t-hard", 1, "c"); f == nil || string(f.data) != "c\n" {
		t.Fatalf("the ordinary file: %+v", f)
	}
	if m.file("t-hard", 1, "a") != nil || m.file("t-hard", 1, "b") != nil {
		t.Fatal("a hard-linked file was uploaded")
	}
	if !strings.Contains(log, "[rlsched] not uploading a: it has 3 hard links") || !strings.Contains(log, "[rlsched] not uploading b: it has 3 hard links") {
		t.Fatalf("the run's log does not say why a and b are missing:\n%s", log)
	}
}

// TestOutputsNotKeptAreInTheRunsLog (issue 25): a sparse file is not
// uploaded (its holes would become real bytes on the master), and it and a
// file the master refused are each named in the run's own log, last sync
// included, before its TaskFinished.
func TestOutputsNotKeptAreInTheRunsLog(t *testing.T) {
	m := newFakeMaster(t, testToken)
	m.mu.Lock()
	m.maxFiles = 1
	m.mu.Unlock()
	startWorker(t, m, nil)
	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-sp", Attempt: 1, Fence: 1, Argv: []string{"sh", "-c",
		`cd "$RLSCHED_OUTPUT_DIR" && truncate -s 256M sparse.bin && echo a > a && echo b > b`}})
	mc.started(t, "t-sp")
	if fin := mc.finished(t, "t-sp", 30*time.Second); fin.GetExitCode() != 0 || fin.GetLogBytes() != uint64(len(m.log("t-sp", 1))) {
		t.Fatalf("run: %v, log %q", fin, m.log("t-sp", 1))
	}
	log := m.log("t-sp", 1)
	for _, want := range []string{
		"[rlsched] not uploading sparse.bin: it is sparse, 256.0 MiB in size of which 0.0 MiB are on disk",
		": the master does not keep it: the run keeps at most so many files\n",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the run's log lacks %q:\n%s", want, log)
		}
	}
	if n := m.partial("t-sp", 1, "sparse.bin"); n != 0 {
		t.Fatalf("%d bytes of the sparse file were sent", n)
	}
}
