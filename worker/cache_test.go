package worker

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/worker/isolation"
)

// TestCache_PersistsPerUser: a user's cache dir outlives the run under a
// dynamic uid and the next run of the user finds what the first left; it
// is the worker's between runs, and another user's run gets a dir of its
// own.
func TestCache_PersistsPerUser(t *testing.T) {
	m := newFakeMaster(t, testToken)
	cfg := isoWorker(t, m, isolation.UIDRange{First: 62090, Last: 62099}, nil)
	mc := m.next(t)
	fin, out := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-c1", Attempt: 1, User: "alice",
		Argv: []string{"sh", "-c", `mkdir -p "$PIP_CACHE_DIR" && echo wheel > "$PIP_CACHE_DIR/w" && echo "$XDG_CACHE_HOME $HF_HOME $TORCH_HOME"`}})
	dir := filepath.Join(cfg.DataDir, "cache", "alice")
	if fin.GetExitCode() != 0 || strings.TrimSpace(out) != dir+" "+dir+"/huggingface "+dir+"/torch" {
		t.Fatalf("first run: %v %q", fin, out)
	}
	st, err := os.Stat(filepath.Join(dir, "pip", "w"))
	if err != nil || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("between runs the cache file is %v %v, want the worker's", st, err)
	}
	fin, out = runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-c2", Attempt: 1, User: "alice",
		Argv: []string{"sh", "-c", `cat "$PIP_CACHE_DIR/w"`}})
	if fin.GetExitCode() != 0 || out != "wheel\n" {
		t.Fatalf("second run: %v %q", fin, out)
	}
	fin, out = runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-c3", Attempt: 1, User: "bob",
		Argv: []string{"sh", "-c", `echo "$XDG_CACHE_HOME"; cat ` + filepath.Join(dir, "pip", "w") + ` 2>&1`}})
	if fin.GetExitCode() == 0 || !strings.HasPrefix(out, filepath.Join(cfg.DataDir, "cache", "bob")+"\n") || !strings.Contains(out, "Permission denied") {
		t.Fatalf("another user's run: %v %q", fin, out)
	}
}
