package worker

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestLease_FrozenWorkersRunDiesOnTime is issue 11's frozen worker: a worker
// process stopped with SIGSTOP (its whole process group, as Ctrl-Z would)
// for longer than the lease TTL. The master may give the run to another
// worker once the TTL has passed, so the run's processes must be gone by
// then, although the worker never runs again to kill them: the guard does.
func TestLease_FrozenWorkersRunDiesOnTime(t *testing.T) {
	const (
		ttl   = 2 * time.Second // acks may stall for a good part of it on a loaded machine
		slack = 2 * time.Second // scheduling delays on a loaded machine
	)
	m := newFakeMaster(t, testToken)
	m.setAck(func(*pb.Hello) *pb.HelloAck {
		return &pb.HelloAck{Session: "s1", HeartbeatIntervalMs: 100, LeaseTtlMs: ttl.Milliseconds(), MasterId: "m1"}
	})
	var out testutil.SyncBuffer
	lw := &testLog{t: t}
	defer lw.stop()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envTestMaster+"="+m.addr(), envTestDir+"="+testutil.ReachableTempDir(t))
	cmd.Stdout, cmd.Stderr = io.MultiWriter(lw, &out), io.MultiWriter(lw, &out)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	worker := cmd.Process.Pid
	defer func() {
		syscall.Kill(-worker, syscall.SIGKILL) // a stopped process dies of SIGKILL too
		cmd.Wait()
	}()

	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-frozen", Attempt: 1, Fence: 3,
		Argv: []string{"sh", "-c", "sleep 600 & echo started; wait"}})
	pgid := int(mc.started(t, "t-frozen").GetPid())
	waitFor(t, 10*time.Second, "the grandchild to start", func() bool { return m.log("t-frozen", 1) == "started\n" })

	// While renewals are acked the run outlives several TTLs.
	n0, _ := mc.heartbeats()
	waitFor(t, 30*time.Second, "60 acked heartbeats (6s, 3 TTLs)", func() bool { n, _ := mc.heartbeats(); return n >= n0+60 })
	if testutil.GroupGone(pgid) {
		t.Fatal("run killed although its renewals were acked")
	}

	if err := syscall.Kill(-worker, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the worker to stop", func() bool { return procState(worker) == 'T' })
	testutil.WaitGroupGone(t, pgid, ttl+10*time.Second)
	killed := time.Now()
	lastAck := time.Unix(0, mc.hbAckAt.Load())
	if st := procState(worker); st != 'T' {
		t.Fatalf("worker in state %c when its run died; the test needs it stopped", st)
	}
	if late := killed.Sub(lastAck); late > ttl+slack {
		t.Fatalf("run died %v after the last acked renewal; want at most the %v TTL + %v", late, ttl, slack)
	}
	if want := fmt.Sprintf("rlsched guard: lease of process group %d expired", pgid); !strings.Contains(out.String(), want) {
		t.Fatalf("the guard did not log %q", want)
	}
}

// procState is the state letter of pid in /proc/pid/stat (0 when gone).
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}
