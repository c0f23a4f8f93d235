package worker

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/worker/isolation"
)

// finishedBoth waits for the TaskFinished of two runs, in either order.
func finishedBoth(t *testing.T, mc *masterConn) map[string]*pb.TaskFinished {
	t.Helper()
	fins := map[string]*pb.TaskFinished{}
	for len(fins) < 2 {
		f := mc.expect(t, 30*time.Second, "TaskFinished", func(m proto.Message) bool { _, ok := m.(*pb.TaskFinished); return ok }).(*pb.TaskFinished)
		fins[f.GetTaskId()] = f
		mc.send(&pb.TaskFinishedAck{TaskId: f.GetTaskId(), Attempt: f.GetAttempt()})
	}
	return fins
}

// TestDisk_RunLimit: a run under a uid of its own that writes past
// DISK_MAX_MB into /tmp is stopped with reason disk, its log saying why as
// its last line, and what it left in /tmp is gone with its uid; a
// neighbour writing a little into its TMPDIR finishes.
func TestDisk_RunLimit(t *testing.T) {
	m := newFakeMaster(t, testToken)
	isoWorker(t, m, isolation.UIDRange{First: 62160, Last: 62161}, func(c *Config) {
		c.DiskMaxMB, c.diskEvery = 8, 20*time.Millisecond
	})
	mc := m.next(t)
	big := "/tmp/rlsched-disk-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { os.Remove(big) })
	mc.send(&pb.ExecuteTask{TaskId: "t-fill", Attempt: 1, Fence: 1,
		Argv: []string{"sh", "-c", `head -c 20000000 /dev/zero > "$1"; echo written; exec sleep 60`, "sh", big}})
	mc.send(&pb.ExecuteTask{TaskId: "t-small", Attempt: 1, Fence: 1,
		Argv: []string{"sh", "-c", `head -c 1000000 /dev/zero > "$TMPDIR/f"; sleep 1; echo done`}})
	fins := finishedBoth(t, mc)
	fill, small := fins["t-fill"], fins["t-small"]
	if fill.GetReason() != core.ReasonDisk || !strings.HasPrefix(fill.GetError(), "used ") ||
		!strings.Contains(fill.GetError(), "over the 8 MiB a run may fill on this worker (DISK_MAX_MB)") {
		t.Fatalf("the run that filled /tmp: %v", fill)
	}
	lines := strings.Split(strings.TrimRight(m.log("t-fill", 1), "\n"), "\n")
	if last := lines[len(lines)-1]; last != "[rlsched] stopped by the worker: the run "+fill.GetError() {
		t.Fatalf("its log ends %q", last)
	}
	if small.GetExitCode() != 0 || small.GetReason() != "" || m.log("t-small", 1) != "done\n" {
		t.Fatalf("the neighbour: %v %q", small, m.log("t-small", 1))
	}
	if _, err := os.Lstat(big); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s outlived its run's uid: %v", big, err)
	}
}

// TestDisk_ShortDisk: when the disk of the runs' dirs has less free than
// DISK_MIN_FREE_PERCENT, the run holding the most of it is stopped and the
// one holding little finishes. The data dir is a tmpfs of 64 MiB made here.
func TestDisk_ShortDisk(t *testing.T) {
	testutil.NeedRoot(t)
	dir := filepath.Join(testutil.ReachableTempDir(t), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64m,mode=0755"); err != nil {
		t.Fatalf("cannot mount a tmpfs for the data dir: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	m := newFakeMaster(t, testToken)
	isoWorker(t, m, isolation.UIDRange{First: 62162, Last: 62163}, func(c *Config) {
		c.DataDir, c.DiskMinFreePercent, c.diskEvery = dir, 50, 20*time.Millisecond
	})
	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-hog", Attempt: 1, Fence: 1,
		Argv: []string{"sh", "-c", `head -c 40000000 /dev/zero > "$TMPDIR/big"; echo written; exec sleep 60`}})
	mc.send(&pb.ExecuteTask{TaskId: "t-calm", Attempt: 1, Fence: 1,
		Argv: []string{"sh", "-c", `head -c 100000 /dev/zero > "$TMPDIR/f"; sleep 1; echo done`}})
	fins := finishedBoth(t, mc)
	hog, calm := fins["t-hog"], fins["t-calm"]
	if hog.GetReason() != core.ReasonDisk || !strings.HasPrefix(hog.GetError(), "held the most of the disk of ") ||
		!strings.Contains(hog.GetError(), "below the 50% this worker keeps free (DISK_MIN_FREE_PERCENT)") {
		t.Fatalf("the run that filled the disk: %v", hog)
	}
	if calm.GetExitCode() != 0 || calm.GetReason() != "" {
		t.Fatalf("the neighbour: %v %q", calm, m.log("t-calm", 1))
	}
}
