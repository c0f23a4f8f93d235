package worker

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/worker/isolation"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
)

// isoWorker starts a worker as root with runs under uids of r.
func isoWorker(t *testing.T, m *fakeMaster, r isolation.UIDRange, edit func(*Config)) Config {
	t.Helper()
	testutil.NeedRoot(t)
	return startWorker(t, m, func(c *Config) {
		c.RunAs, c.RunUIDs, c.UIDLockDir = RunAsDynamic, r, filepath.Join(testutil.ReachableTempDir(t), "uids")
		if edit != nil {
			edit(c)
		}
	})
}

// TestIsolation_RunUnderOwnUID: a run has a uid of the range, only its own
// group, and its private dir as HOME, TMPDIR and working directory;
// afterwards its output dir is the worker's again and its private dir gone.
func TestIsolation_RunUnderOwnUID(t *testing.T) {
	m := newFakeMaster(t, testToken)
	cfg := isoWorker(t, m, isolation.UIDRange{First: 62040, Last: 62049}, nil)
	mc := m.next(t)
	fin, out := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-uid", Attempt: 1,
		Argv: []string{"sh", "-c", `echo "UID=$(id -u)"; echo "GROUPS=$(id -G)"; echo "OWNER=$(stat -c %u:%g:%a "$RLSCHED_OUTPUT_DIR")"; ` +
			`echo "PRIVATE=$(stat -c %u:%a "$HOME")"; echo "CWD=$(pwd)"; env`}})
	if fin.GetExitCode() != 0 {
		t.Fatalf("run: %v\n%s", fin, out)
	}
	env := envMap(out)
	uid, _ := strconv.Atoi(env["UID"])
	outDir := filepath.Join(cfg.DataDir, "outputs", "t-uid", "1")
	privDir := filepath.Join(cfg.DataDir, "private", "t-uid.1")
	if uid < 62040 || uid > 62049 {
		t.Fatalf("the run ran as uid %q, want one of 62040-62049\n%s", env["UID"], out)
	}
	for k, v := range map[string]string{
		"GROUPS": env["UID"], "OWNER": env["UID"] + ":" + env["UID"] + ":700",
		"HOME": privDir, "TMPDIR": privDir, "CWD": privDir, "PRIVATE": env["UID"] + ":700",
		"USER": "rlsched-" + env["UID"], "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
	} {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	// The output dir is removed once the master holds all of it (after the
	// ack): until then it is the worker's again.
	if st, err := os.Stat(outDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	} else if err == nil {
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 0 || st.Mode().Perm() != 0o700 {
			t.Errorf("after the run its dir is uid %d mode %o, want the worker's (0) and 0700", sys.Uid, st.Mode().Perm())
		}
	}
	if _, err := os.Lstat(privDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the run's private dir outlived it: %v", err)
	}
}

// TestIsolation_PrivateFilesNotUploaded (issue 25): what a run writes for
// itself (a credential in $HOME, a file in $TMPDIR or where it starts) is
// never an output; only RLSCHED_OUTPUT_DIR is.
func TestIsolation_PrivateFilesNotUploaded(t *testing.T) {
	m := newFakeMaster(t, testToken)
	isoWorker(t, m, isolation.UIDRange{First: 62030, Last: 62039}, nil)
	mc := m.next(t)
	fin, out := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-private", Attempt: 1,
		Argv: []string{"sh", "-c", `set -e; echo "machine h login u password p" > "$HOME/.netrc"; mkdir -p "$HOME/.cache/huggingface"; ` +
			`echo tok > "$HOME/.cache/huggingface/token"; echo t > "$TMPDIR/t"; echo c > cwdfile; echo ok > "$RLSCHED_OUTPUT_DIR/ok"`}})
	if fin.GetExitCode() != 0 {
		t.Fatalf("run: %v\n%s", fin, out)
	}
	waitFor(t, 10*time.Second, "the output reaches the master", func() bool { return m.file("t-private", 1, "ok") != nil })
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.files {
		if k != "t-private/1/ok" {
			t.Errorf("uploaded %s, which the run wrote for itself", k)
		}
	}
}

// TestIsolation_RunsCannotSignalEachOther: two live runs have two uids, and
// neither can signal the other; a process that left its run's group dies
// with the run all the same.
func TestIsolation_RunsCannotSignalEachOther(t *testing.T) {
	m := newFakeMaster(t, testToken)
	cfg := isoWorker(t, m, isolation.UIDRange{First: 62050, Last: 62059}, nil)
	mc := m.next(t)
	pidFile := filepath.Join(testutil.ReachableTempDir(t), "victim.pid")
	if err := os.WriteFile(pidFile, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pidFile, 0o666); err != nil {
		t.Fatal(err)
	}
	mc.send(&pb.ExecuteTask{TaskId: "t-victim", Attempt: 1,
		Argv: []string{"sh", "-c", `echo $$ > "$1"; setsid sleep 600 & echo "UID=$(id -u)"; exec sleep 600`, "sh", pidFile}})
	victim := mc.started(t, "t-victim")
	waitFor(t, 10*time.Second, "the victim's pid file", func() bool {
		b, _ := os.ReadFile(pidFile)
		return strings.TrimSpace(string(b)) == strconv.Itoa(int(victim.GetPid()))
	})
	fin, out := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-attacker", Attempt: 1,
		Argv: []string{"sh", "-c", `echo "UID=$(id -u)"; kill -TERM "$(cat "$1")" && echo KILLED; kill -TERM -"$(cat "$1")" && echo KILLED_GROUP; exit 0`, "sh", pidFile}})
	if fin.GetExitCode() != 0 || strings.Contains(out, "KILLED") {
		t.Fatalf("the attacker signalled the victim: %v\n%s", fin, out)
	}
	if !strings.Contains(out, "Operation not permitted") {
		t.Errorf("the attacker's kill did not fail with EPERM:\n%s", out)
	}
	waitFor(t, 5*time.Second, "the victim's uid line", func() bool { return strings.Contains(m.log("t-victim", 1), "UID=") })
	victimUID, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(m.log("t-victim", 1), "UID=")))
	if env := envMap(out); env["UID"] == strconv.Itoa(victimUID) || victimUID == 0 {
		t.Fatalf("both runs ran as uid %d", victimUID)
	}
	// The victim lives on; cancelling it kills the escaped sleep too.
	mc.send(&pb.CancelTask{TaskId: "t-victim", Attempt: 1, GraceMs: 200})
	fin = mc.finished(t, "t-victim", 20*time.Second)
	if fin.GetOutcome() != pb.Outcome_OUTCOME_CANCELLED {
		t.Fatalf("victim: %v", fin)
	}
	if pids, err := isolation.UIDProcesses(uint32(victimUID)); err != nil || len(pids) != 0 {
		t.Fatalf("processes of the victim's uid %d after its end: %v %v", victimUID, pids, err)
	}
	_ = cfg
}

// TestIsolation_StartRefusals: what a run under its own uid could not reach
// fails its start with the reason; so does an env the worker sets.
func TestIsolation_StartRefusals(t *testing.T) {
	m := newFakeMaster(t, testToken)
	isoWorker(t, m, isolation.UIDRange{First: 62060, Last: 62061}, nil)
	mc := m.next(t)
	private := t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(private, "prog")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := func(id string, e *pb.ExecuteTask, wantErr ...string) {
		t.Helper()
		e.TaskId, e.Attempt = id, 1
		mc.send(e)
		msg := mc.expect(t, 10*time.Second, "report of "+id, func(m proto.Message) bool {
			switch m := m.(type) {
			case *pb.TaskStarted:
				return m.GetTaskId() == id
			case *pb.TaskFinished:
				return m.GetTaskId() == id
			}
			return false
		})
		fin, ok := msg.(*pb.TaskFinished)
		if !ok || fin.GetOutcome() != pb.Outcome_OUTCOME_START_FAILED {
			t.Fatalf("%s: %v, want START_FAILED", id, msg)
		}
		for _, w := range wantErr {
			if !strings.Contains(fin.GetError(), w) {
				t.Fatalf("%s: error %q, want %q in it", id, fin.GetError(), w)
			}
		}
		mc.send(&pb.TaskFinishedAck{TaskId: id, Attempt: 1})
	}
	f("unreachable-prog", &pb.ExecuteTask{Argv: []string{prog}}, "cannot be run by uid 6206")
	f("unreachable-wd", &pb.ExecuteTask{Argv: []string{"true"}, Workdir: private}, "workdir "+private+" cannot be entered by uid 6206",
		"submit the code as a snapshot", "RUN_AS=user") // a home dir's fix is not "turn isolation off" (issue 32)
	for _, k := range []string{"CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
		"ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "LD_PRELOAD", "ld_preload"} {
		f("env-"+strings.ToLower(k), &pb.ExecuteTask{Argv: []string{"true"}, Env: map[string]string{k: "0"}}, "env "+k+" is refused")
	}
	// Both uids are free again: two runs at once still start.
	for _, id := range []string{"again-1", "again-2"} {
		mc.send(&pb.ExecuteTask{TaskId: id, Attempt: 1, Argv: []string{"sleep", "600"}})
		mc.started(t, id)
	}
}

// TestIsolation_RunAsUser: RUN_AS=user refuses a run whose owner has no
// account (isolation's TestLookupRunUser: the other refusals).
func TestIsolation_RunAsUser(t *testing.T) {
	testutil.NeedRoot(t)
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) { c.RunAs, c.DataDir = RunAsUser, testutil.ReachableTempDir(t) })
	mc := m.next(t)
	fin, out := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-nouser", Attempt: 1, User: "no-such-account-x", Argv: []string{"true"}})
	if fin.GetOutcome() != pb.Outcome_OUTCOME_START_FAILED || !strings.Contains(fin.GetError(), "useradd") {
		t.Fatalf("unknown account: %v %s", fin, out)
	}
}

// TestIsolation_TightensEarlierDirs: a data dir an earlier version left open
// (0755 everywhere, a run dir still owned by a dynamic uid) is closed at start.
func TestIsolation_TightensEarlierDirs(t *testing.T) {
	testutil.NeedRoot(t)
	dir := testutil.ReachableTempDir(t)
	old := filepath.Join(dir, "outputs", "r-old", "1")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "outputs"), filepath.Dir(old), old} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(old, 62071, 62071); err != nil {
		t.Fatal(err)
	}
	m := newFakeMaster(t, testToken)
	isoWorker(t, m, isolation.UIDRange{First: 62070, Last: 62079}, func(c *Config) { c.DataDir = dir })
	m.next(t)
	for p, want := range map[string]os.FileMode{dir: 0o711, filepath.Join(dir, "outputs"): 0o711, filepath.Dir(old): 0o711,
		old: 0o700, filepath.Join(dir, "scripts"): 0o755} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %o, want %o", p, st.Mode().Perm(), want)
		}
	}
	st, _ := os.Stat(old)
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid != 0 {
		t.Errorf("the earlier run's dir is still owned by uid %d, want the worker's", uid)
	}
}

// TestIsolation_SweepOnRelease (issue 25): what a run of a dynamic uid
// leaves in /tmp, /dev/shm and SysV IPC is gone once its uid is free (the
// TaskFinished comes after), so the next run of that uid cannot read it,
// also in a shared sticky dir; another uid's file, the file a removed link
// of the run named, and what the run left in a drop box (another owner's
// world-writable dir without the sticky bit, as labs pass files between
// runs) stay.
func TestIsolation_SweepOnRelease(t *testing.T) {
	m := newFakeMaster(t, testToken)
	const uid = 62090
	isoWorker(t, m, isolation.UIDRange{First: uid, Last: uid}, nil)
	mc := m.next(t)
	tag := strconv.Itoa(os.Getpid())
	other := "/tmp/rlsched-sweep-other-" + tag
	if err := os.WriteFile(other, []byte("other"), 0o666); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(other) })
	if err := os.Chown(other, uid+1, uid+1); err != nil {
		t.Fatal(err)
	}
	shared := map[string]os.FileMode{"/tmp/rlsched-sweep-sticky-" + tag: 0o777 | os.ModeSticky, "/tmp/rlsched-sweep-dropbox-" + tag: 0o777}
	for d, mode := range shared {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	left := []string{"/tmp/rlsched-sweep-" + tag, "/dev/shm/rlsched-sweep-" + tag, "/tmp/rlsched-sweep-dir-" + tag, "/tmp/rlsched-sweep-link-" + tag,
		"/tmp/rlsched-sweep-sticky-" + tag + "/f"}
	dropped := "/tmp/rlsched-sweep-dropbox-" + tag + "/f"
	t.Cleanup(func() {
		for _, p := range left {
			os.RemoveAll(p)
		}
		_, _ = isolation.RemoveLeftovers(uid) // its SysV objects, should the test fail
	})
	script := `set -e
echo secret > "$1"; echo secret > "$2"; mkdir -p "$3/a/b"; echo secret > "$3/a/b/f"; ln -s "$7" "$4"; echo secret > "$5"; echo kept > "$6"
ipcmk -M 4096; ipcmk -S 1; ipcmk -Q`
	fin, out := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-sweep", Attempt: 1,
		Argv: append([]string{"sh", "-c", script, "sh"}, append(left, dropped, other)...)})
	if fin.GetExitCode() != 0 {
		t.Fatalf("run: %v\n%s", fin, out)
	}
	for _, p := range left {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s outlived its run's uid: %v", p, err)
		}
	}
	if b, err := os.ReadFile(other); err != nil || string(b) != "other" {
		t.Errorf("another uid's file: %q %v", b, err)
	}
	if b, err := os.ReadFile(dropped); err != nil || string(b) != "kept\n" {
		t.Errorf("the file the run left in a drop box: %q %v", b, err)
	}
	ids := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, " id: "); ok {
			ids[k] = strings.TrimSpace(v)
		}
	}
	for table, kind := range map[string]string{"shm": "Shared memory", "sem": "Semaphore", "msg": "Message queue"} {
		id := ids[kind]
		if id == "" {
			t.Fatalf("no %s id in the run's log:\n%s", kind, out)
		}
		b, err := os.ReadFile("/proc/sysvipc/" + table)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if f := strings.Fields(line); len(f) > 1 && f[1] == id {
				t.Errorf("SysV %s %s outlived its run's uid: %s", table, id, line)
			}
		}
	}
}
