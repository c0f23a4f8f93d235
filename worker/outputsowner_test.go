package worker

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestOutputsOnlyTheRunsOwnFiles (issue 25): the worker reads outputs as
// root, so a file in a run's output dir that its uid does not own (a hard
// link to root's or another account's file, where fs.protected_hardlinks
// is off; here one root puts there) is not uploaded; the run's own are.
func TestOutputsOnlyTheRunsOwnFiles(t *testing.T) {
	testutil.NeedRoot(t)
	m := newFakeMaster(t, testToken)
	cfg := startWorker(t, m, func(c *Config) { c.ArtifactSync = time.Hour })
	mc := m.next(t)
	script := `cd "$RLSCHED_OUTPUT_DIR"
while [ ! -e planted ]; do sleep 0.02; done
echo mine > mine.txt`
	mc.send(&pb.ExecuteTask{TaskId: "t-own", Attempt: 1, Fence: 1, Argv: []string{"sh", "-c", script}})
	mc.started(t, "t-own")
	planted := filepath.Join(cfg.DataDir, "outputs", "t-own", "1", "planted")
	if err := os.WriteFile(planted, []byte("root's secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fin := mc.finished(t, "t-own", 30*time.Second); fin.GetExitCode() != 0 {
		t.Fatalf("run failed: %v, log %q", fin, m.log("t-own", 1))
	}
	if f := m.file("t-own", 1, "mine.txt"); f == nil || string(f.data) != "mine\n" {
		t.Fatalf("the run's own file: %+v", f)
	}
	if f := m.file("t-own", 1, "planted"); f != nil {
		t.Fatalf("a root-owned file in the run's output dir was uploaded: %q", f.data)
	}
}
