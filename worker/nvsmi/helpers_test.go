package nvsmi

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// waitFor waits up to 30 s for cond (generous: the machine running the
// tests may be loaded; testutil.WaitFor).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, 30*time.Second, what, cond)
}

// isZombie reports whether pid has exited but is not yet reaped (an orphan
// waits for init to reap it).
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

// startGroup starts argv in a process group of its own, as the worker starts
// a run; the group is killed when the test ends.
func startGroup(t *testing.T, argv ...string) *exec.Cmd {
	t.Helper()
	return startCmd(t, exec.Command(argv[0], argv[1:]...))
}

func startCmd(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd
}
