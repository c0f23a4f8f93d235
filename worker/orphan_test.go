package worker

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/worker/isolation"
)

// TestOrphan_WorkerSIGKILLed runs a worker in a child process (this test
// binary, see TestMain), has it start a run whose grandchild Pdeathsig cannot
// reach, SIGKILLs the worker, and checks the guard killed the run's group.
func TestOrphan_WorkerSIGKILLed(t *testing.T) {
	m := newFakeMaster(t, testToken)
	w, mc := startChildWorker(t, m)
	mc.send(&pb.ExecuteTask{TaskId: "t-orphan", Attempt: 1,
		Argv: []string{"sh", "-c", "sleep 600 & echo started; wait"}})
	pgid := int(mc.started(t, "t-orphan").GetPid())
	waitFor(t, 10*time.Second, "the grandchild to start", func() bool { return m.log("t-orphan", 1) == "started\n" })

	w.kill(t)
	testutil.WaitGroupGone(t, pgid, 5*time.Second)
}

// TestOrphan_EscapedProcessesOfADynamicUID: a run under a dynamic uid
// starts a process that leaves its group (setsid); the worker is
// SIGKILLed; the guard kills the group and every process of the run's uid,
// so nothing keeps the uid busy.
func TestOrphan_EscapedProcessesOfADynamicUID(t *testing.T) {
	testutil.NeedRoot(t)
	m := newFakeMaster(t, testToken)
	w, mc := startChildWorker(t, m)
	mc.send(&pb.ExecuteTask{TaskId: "t-escape", Attempt: 1,
		Argv: []string{"sh", "-c", "setsid sleep 600 & echo started; wait"}})
	pgid := int(mc.started(t, "t-escape").GetPid())
	waitFor(t, 10*time.Second, "the escapee to start", func() bool { return m.log("t-escape", 1) == "started\n" })
	uid := procUID(t, pgid)
	t.Cleanup(func() { isolation.KillUID(uid, 5*time.Second) })
	if pids, _ := isolation.UIDProcesses(uid); len(pids) < 2 {
		t.Fatalf("uid %d runs %v; want the run's shell and its escaped sleep", uid, pids)
	}

	w.kill(t)
	testutil.WaitGroupGone(t, pgid, 5*time.Second)
	waitFor(t, 10*time.Second, "every process of the run's uid to be gone", func() bool {
		pids, _ := isolation.UIDProcesses(uid)
		return len(pids) == 0
	})
}

// childWorker is a worker in a child process (this test binary, see
// TestMain), so that a test can SIGKILL it.
type childWorker struct {
	cmd    *exec.Cmd
	exited bool
}

// startChildWorker starts a worker joined to m and returns it with its
// connection. It is killed at the end of the test unless the test did.
func startChildWorker(t *testing.T, m *fakeMaster) (*childWorker, *masterConn) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envTestMaster+"="+m.addr(), envTestDir+"="+testutil.ReachableTempDir(t))
	lw := &testLog{t: t}
	t.Cleanup(lw.stop)
	cmd.Stdout, cmd.Stderr = lw, lw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &childWorker{cmd: cmd}
	t.Cleanup(func() {
		if !w.exited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return w, m.next(t)
}

// kill SIGKILLs the worker and reaps it.
func (w *childWorker) kill(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	w.cmd.Wait()
	w.exited = true
}

// procUID is the real uid of process pid.
func procUID(t *testing.T, pid int) uint32 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				uid, err := strconv.ParseUint(f[0], 10, 32)
				if err == nil {
					return uint32(uid)
				}
			}
		}
	}
	t.Fatalf("no uid in /proc/%d/status", pid)
	return 0
}
