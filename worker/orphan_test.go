package worker

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testutil"
)

// TestOrphan_WorkerSIGKILLed runs a worker in a child process (this test
// binary, see TestMain), has it start a run whose grandchild Pdeathsig cannot
// reach, SIGKILLs the worker, and checks the guard killed the run's group.
func TestOrphan_WorkerSIGKILLed(t *testing.T) {
	m := newFakeMaster(t, testToken)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envTestMaster+"="+m.addr(), envTestDir+"="+testutil.ReachableTempDir(t))
	lw := &testLog{t: t}
	defer lw.stop()
	cmd.Stdout, cmd.Stderr = lw, lw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	defer func() {
		if !exited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()

	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-orphan", Attempt: 1,
		Argv: []string{"sh", "-c", "sleep 600 & echo started; wait"}})
	pgid := int(mc.started(t, "t-orphan").GetPid())
	waitFor(t, 10*time.Second, "the grandchild to start", func() bool { return m.log("t-orphan", 1) == "started\n" })

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	exited = true
	waitGroupGone(t, pgid, 5*time.Second)
}
