package worker

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/scripts"
	"github.com/rlsched/rlsched/worker/leaseguard"
)

func TestExecute_ExitCodeLogsAndAcks(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	mc.ackLogs.Store(false)
	mc.send(&pb.ExecuteTask{TaskId: "t1", Attempt: 1, Fence: 7,
		Argv: []string{"sh", "-c", "echo hi; echo err >&2; exit 3"}})

	st := mc.started(t, "t1")
	if st.GetFence() != 7 || st.GetAttempt() != 1 || st.GetPid() <= 0 {
		t.Fatalf("TaskStarted: %v", st)
	}
	first := mc.expect(t, 10*time.Second, "LogData", func(m proto.Message) bool { _, ok := m.(*pb.LogData); return ok }).(*pb.LogData)
	if first.GetOffset() != 0 || first.GetFence() != 7 {
		t.Fatalf("first LogData: %v", first)
	}
	waitFor(t, 10*time.Second, "the whole output", func() bool { return m.log("t1", 1) == "hi\nerr\n" })
	waitFor(t, 10*time.Second, "the run listed as finished in heartbeats", func() bool {
		_, hb := mc.heartbeats()
		return len(hb.GetRuns()) == 1 && hb.GetRuns()[0].GetFinished()
	})
	// Output not acked yet: no TaskFinished.
	mc.expectNone(t, 300*time.Millisecond, "TaskFinished before LogAck", isFinished("t1"))

	mc.ackLog("t1", 1, 7, false)
	fin := mc.finished(t, "t1", 10*time.Second)
	if fin.GetOutcome() != pb.Outcome_OUTCOME_EXITED || fin.GetExitCode() != 3 || fin.GetSignal() != "" ||
		fin.GetLogBytes() != 7 || fin.GetFence() != 7 || fin.GetDurationMs() < 0 {
		t.Fatalf("TaskFinished: %v", fin)
	}
	if got := m.log("t1", 1); got != "hi\nerr\n" {
		t.Fatalf("log = %q", got)
	}
	mc.send(&pb.TaskFinishedAck{TaskId: "t1", Attempt: 1})
	waitFor(t, 5*time.Second, "the run to leave heartbeats", func() bool {
		_, hb := mc.heartbeats()
		return hb != nil && len(hb.GetRuns()) == 0
	})
}

// runToEnd executes argv as task id and returns its TaskFinished and output.
func runToEnd(t *testing.T, m *fakeMaster, mc *masterConn, e *pb.ExecuteTask) (*pb.TaskFinished, string) {
	t.Helper()
	mc.send(e)
	fin := mc.finished(t, e.GetTaskId(), 20*time.Second)
	mc.send(&pb.TaskFinishedAck{TaskId: e.GetTaskId(), Attempt: e.GetAttempt()})
	return fin, m.log(e.GetTaskId(), e.GetAttempt())
}

func envMap(out string) map[string]string {
	env := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

func TestExecute_Environment(t *testing.T) {
	m := newFakeMaster(t, testToken)
	cfg := startWorker(t, m, nil)
	mc := m.next(t)
	fin, out := runToEnd(t, m, mc, &pb.ExecuteTask{
		TaskId: "t-env", Attempt: 2, Fence: 1, TraceId: "trace-1", ParamsJson: `{"lr": 0.1}`,
		GpuIndices: []int32{1, 0},
		Env:        map[string]string{"FOO": "bar baz", "PYTHONPATH": "/opt/x", "PYTHONUNBUFFERED": "0"},
		Argv:       []string{"sh", "-c", `env; echo "CWD=$(pwd -P)"`},
	})
	if fin.GetExitCode() != 0 {
		t.Fatalf("env run: %v\n%s", fin, out)
	}
	env := envMap(out)
	outDir := filepath.Join(cfg.DataDir, "outputs", "t-env", "2")
	// The dir itself is gone once the master holds all of it: resolve the
	// data dir, which stays.
	realData, _ := filepath.EvalSymlinks(cfg.DataDir)
	realPriv := filepath.Join(realData, "private", "t-env.2")
	want := map[string]string{
		"CUDA_VISIBLE_DEVICES": "1,0",
		"RLSCHED_TASK_ID":      "t-env",
		"RLSCHED_ATTEMPT":      "2",
		"RLSCHED_TRACE_ID":     "trace-1",
		"RLSCHED_PARAMS":       `{"lr": 0.1}`,
		"RLSCHED_OUTPUT_DIR":   outDir,
		"PYTHONUNBUFFERED":     "0", // the task's env comes last
		"PYTHONPATH":           filepath.Join(cfg.DataDir, "scripts") + ":/opt/x",
		"FOO":                  "bar baz",
		"CWD":                  realPriv, // what it writes where it starts is not an output
		"TMPDIR":               filepath.Join(cfg.DataDir, "private", "t-env.2"),
		"PATH":                 os.Getenv("PATH"),
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if _, ok := env[leaseguard.Env]; ok {
		t.Errorf("%s leaked into the run", leaseguard.Env)
	}

	fin, out = runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-env2", Attempt: 0, Argv: []string{"env"}})
	env = envMap(out)
	if v, ok := env["CUDA_VISIBLE_DEVICES"]; !ok || v != "" {
		t.Errorf("without GPUs CUDA_VISIBLE_DEVICES = %q (set %v), want empty", v, ok)
	}
	if env["PYTHONUNBUFFERED"] != "1" || env["PYTHONPATH"] == "" {
		t.Errorf("defaults: PYTHONUNBUFFERED=%q PYTHONPATH=%q", env["PYTHONUNBUFFERED"], env["PYTHONPATH"])
	}
}

func TestExecute_Scripts(t *testing.T) {
	m := newFakeMaster(t, testToken)
	cfg := startWorker(t, m, nil)
	mc := m.next(t)
	want, err := fs.ReadFile(scripts.FS, "rlsched.py")
	if err != nil {
		t.Fatal(err)
	}
	fin, out := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-cat", Attempt: 1,
		Argv: []string{"sh", "-c", `echo "$1"; cat "$1"`, "sh", "@scripts/rlsched.py"}})
	path := filepath.Join(cfg.DataDir, "scripts", "rlsched.py")
	if fin.GetExitCode() != 0 || out != path+"\n"+string(want) {
		t.Fatalf("cat of @scripts/rlsched.py: %v\n%q", fin, out)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Log("no python3: skipping the import check")
		return
	}
	fin, out = runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-py", Attempt: 1,
		Argv: []string{"python3", "-c", "import os, rlsched; print(os.path.dirname(rlsched.__file__))"}})
	if fin.GetExitCode() != 0 || out != filepath.Join(cfg.DataDir, "scripts")+"\n" {
		t.Fatalf("import rlsched: %v\n%s", fin, out)
	}
}

func TestExecute_StartFailed(t *testing.T) {
	m := newFakeMaster(t, testToken)
	cfg := startWorker(t, m, nil)
	mc := m.next(t)
	f := func(id string, argv []string, env map[string]string, gpus []int32, wantErr string) {
		t.Helper()
		mc.send(&pb.ExecuteTask{TaskId: id, Attempt: 1, Fence: 3, Argv: argv, Env: env, GpuIndices: gpus})
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
		if !ok {
			t.Fatalf("%s: got %v, want TaskFinished START_FAILED", id, msg)
		}
		if fin.GetOutcome() != pb.Outcome_OUTCOME_START_FAILED || !strings.Contains(fin.GetError(), wantErr) || fin.GetFence() != 3 {
			t.Fatalf("%s: %v, want START_FAILED with %q", id, fin, wantErr)
		}
		mc.send(&pb.TaskFinishedAck{TaskId: id, Attempt: 1})
	}
	f("../escape", []string{"true"}, nil, nil, "invalid task id")
	f("", []string{"true"}, nil, nil, "invalid task id")
	f(strings.Repeat("a", 65), []string{"true"}, nil, nil, "invalid task id")
	f("no-argv", nil, nil, nil, "empty argv")
	f("no-script", []string{"python3", "@scripts/nope.py"}, nil, nil, "no script")
	f("bad-script", []string{"python3", "@scripts/../etc/passwd"}, nil, nil, "invalid script")
	f("no-binary", []string{"/nonexistent/bin/x"}, nil, nil, "no such file")
	f("reserved-env", []string{"true"}, map[string]string{"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, nil, "set by rlsched")
	f("bad-gpu", []string{"true"}, nil, []int32{7}, "GPU 7")
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "escape")); !os.IsNotExist(err) {
		t.Fatalf("an invalid task id touched the filesystem: %v", err)
	}
}
