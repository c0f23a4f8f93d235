package worker

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestLeftoversRemovedWithTheUID (issue 25): what a run under a dynamic uid
// leaves in /tmp, /dev/shm and System V IPC is removed before its uid goes
// to another run, which would read it; root's files there stay.
func TestLeftoversRemovedWithTheUID(t *testing.T) {
	testutil.NeedRoot(t)
	if _, err := exec.LookPath("ipcmk"); err != nil {
		t.Skip("ipcmk (util-linux) is not installed")
	}
	tag := "rlsched-leftover-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + time.Now().Format("150405.000000000")
	mine := filepath.Join("/tmp", tag+"-root")
	if err := os.WriteFile(mine, []byte("root's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(mine) })
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	script := `set -e
echo "uid $(id -u)"
echo secret > /tmp/` + tag + `
mkdir /tmp/` + tag + `.d && echo secret > /tmp/` + tag + `.d/f
echo secret > /dev/shm/` + tag + `
ipcmk -M 4096
ipcmk -Q
ipcmk -S 1`
	mc.send(&pb.ExecuteTask{TaskId: "t-left", Attempt: 1, Fence: 1, Argv: []string{"sh", "-c", script}})
	mc.started(t, "t-left")
	fin := mc.finished(t, "t-left", 30*time.Second)
	log := m.log("t-left", 1)
	if fin.GetExitCode() != 0 {
		t.Fatalf("run failed: %v, log %q", fin, log)
	}
	uid := regexp.MustCompile(`uid (\d+)`).FindStringSubmatch(log)
	if uid == nil || uid[1] == "0" {
		t.Fatalf("the run's uid is not a dynamic one: %q", log)
	}
	for _, p := range []string{"/tmp/" + tag, "/tmp/" + tag + ".d", "/dev/shm/" + tag} {
		if _, err := os.Lstat(p); err == nil {
			os.RemoveAll(p)
			t.Errorf("%s is left after the run's uid was released", p)
		}
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("root's file in /tmp: %v", err)
	}
	for _, table := range []string{"shm", "msg", "sem"} {
		b, err := os.ReadFile("/proc/sysvipc/" + table)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		head := strings.Fields(lines[0])
		col := -1
		for i, h := range head {
			if h == "cuid" {
				col = i
			}
		}
		for _, l := range lines[1:] {
			if f := strings.Fields(l); col >= 0 && len(f) > col && f[col] == uid[1] {
				t.Errorf("System V %s of the run's uid %s left: %s", table, uid[1], l)
			}
		}
	}
}
