package dispatch

import (
	"context"
	"testing"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
)

// TestExecute_PythonEnv (issue 27): the run's Python environment reaches
// its worker in ExecuteTask.
func TestExecute_PythonEnv(t *testing.T) {
	h := newClockedHarness(t, nil)
	p := dial(t, h.m.Addr())
	p.hello("w1", 1, 0)
	task := core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: []string{"python3", "train.py"}, Attempt: 1,
		MaxRetries: 1, TraceID: core.NewTraceID(), Status: core.StatusQueued,
		Python: &core.PythonEnv{Requirements: "exp/requirements.txt"}}
	if err := h.st.CreateTask(context.Background(), &task); err != nil {
		t.Fatal(err)
	}
	h.m.Notify()
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex.TaskId != task.ID || ex.PythonRequirements != "exp/requirements.txt" || ex.PythonVenv != "" {
		t.Fatalf("ExecuteTask %v", ex)
	}
}
