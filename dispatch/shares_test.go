package dispatch

import (
	"context"
	"testing"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
)

// Where a run may go, on the master (issue 28): Hello's labels in the
// worker list; a CPU run constrained to a labelled CPU pool goes there and
// not to the GPU machine; a run asking for an A100 never lands on the RTX
// worker; a fractional run's ExecuteTask carries its fraction and its
// share of the GPU's memory, and the worker list shows the share.
func TestPlacementOnTheMaster(t *testing.T) {
	h := newClockedHarness(t, nil)
	join := func(id string, hello *pb.Hello) *peer {
		t.Helper()
		p := dial(t, h.m.Addr())
		hello.WorkerId, hello.Host = id, "test"
		if _, ok := p.join(hello).(*pb.HelloAck); !ok {
			t.Fatalf("Hello of %s refused", id)
		}
		return p
	}
	rtx := join("rtx", &pb.Hello{Slots: 4, Labels: map[string]string{"pool": "gpu"},
		Gpus: []*pb.GPU{{Index: 0, Name: "NVIDIA GeForce RTX 4090", MemoryMb: 24564}}})
	a100 := join("a100", &pb.Hello{Slots: 4, Labels: map[string]string{"pool": "gpu"},
		Gpus: []*pb.GPU{{Index: 0, Name: "NVIDIA A100-SXM4-80GB", MemoryMb: 81920}}})
	cpu := join("cpu", &pb.Hello{Slots: 4, Labels: map[string]string{"pool": "cpu"}})
	run := func(set func(*core.Task)) core.Task {
		t.Helper()
		task := core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: []string{"x"},
			Attempt: 1, MaxRetries: 1, TraceID: core.NewTraceID(), Status: core.StatusQueued}
		set(&task)
		if err := h.st.CreateTask(context.Background(), &task); err != nil {
			t.Fatal(err)
		}
		h.m.Notify()
		return task
	}
	c := run(func(t *core.Task) { t.Constraints = map[string]string{"pool": "cpu"} })
	if ex := cpu.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask); ex.TaskId != c.ID {
		t.Fatalf("the CPU pool started %s, want %s", ex.TaskId, c.ID)
	}
	q := run(func(t *core.Task) { t.GPUFraction, t.GPUType = 0.25, []string{"a100"} })
	ex := a100.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex.TaskId != q.ID || ex.GpuFraction != 0.25 || ex.GpuMemoryMb != 20480 || len(ex.GpuIndices) != 1 || ex.GpuIndices[0] != 0 {
		t.Fatalf("ExecuteTask %+v, want %s on GPU 0 with 0.25 and 20480 MiB", ex, q.ID)
	}
	w := run(func(t *core.Task) { t.GPUs = 1 }) // whole: never the shared A100
	if ex := rtx.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask); ex.TaskId != w.ID || ex.GpuFraction != 0 || ex.GpuMemoryMb != 0 {
		t.Fatalf("the RTX worker got %+v, want %s whole", ex, w.ID)
	}
	for _, wi := range h.m.Workers() {
		switch wi.ID {
		case "cpu":
			if wi.Labels["pool"] != "cpu" {
				t.Fatalf("cpu's labels %v", wi.Labels)
			}
		case "a100":
			g := wi.GPUs[0]
			if g.TaskID != "" || len(g.Shares) != 1 || g.Shares[0] != (core.GPUShare{TaskID: q.ID, Fraction: 0.25, MemoryMB: 20480}) {
				t.Fatalf("a100's GPU %+v", g)
			}
		}
	}
}

// On a worker whose MPS GPUs serve one user at a time (gpu.sharing
// mps-per-user, issue 28), the master keeps a second user's fraction off a
// GPU the first user's runs share: it takes the other GPU, and the first
// user's next fraction joins the first.
func TestMPSPerUserSharesOnTheMaster(t *testing.T) {
	h := newClockedHarness(t, nil)
	p := dial(t, h.m.Addr())
	if _, ok := p.join(&pb.Hello{WorkerId: "mps", Host: "test", Slots: 8, Labels: map[string]string{core.LabelGPUSharing: core.SharingMPSPerUser},
		Gpus: []*pb.GPU{{Index: 0, Name: "NVIDIA A100", MemoryMb: 40960}, {Index: 1, Name: "NVIDIA A100", MemoryMb: 40960}}}).(*pb.HelloAck); !ok {
		t.Fatal("Hello refused")
	}
	bob := h.newUser(t, "bob")
	gpuOf := func(user int64) (string, int32) {
		t.Helper()
		task := core.Task{ID: core.NewTaskID(), UserID: user, Command: []string{"x"}, GPUFraction: 0.25,
			Attempt: 1, MaxRetries: 1, TraceID: core.NewTraceID(), Status: core.StatusQueued}
		if err := h.st.CreateTask(context.Background(), &task); err != nil {
			t.Fatal(err)
		}
		h.m.Notify()
		ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
		if ex.TaskId != task.ID || len(ex.GpuIndices) != 1 {
			t.Fatalf("ExecuteTask %+v, want %s on one GPU", ex, task.ID)
		}
		return task.ID, ex.GpuIndices[0]
	}
	_, first := gpuOf(h.owner.ID)
	_, other := gpuOf(bob.ID)
	_, again := gpuOf(h.owner.ID)
	if other == first || again != first {
		t.Fatalf("owner's quarters on GPUs %d and %d, bob's on %d: want the owner's together and bob's apart", first, again, other)
	}
}
