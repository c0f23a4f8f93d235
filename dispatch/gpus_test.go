package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/gpuwatch"
	"github.com/rlsched/rlsched/dispatch/plan"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

func gpuSample(util []uint32, foreign ...*pb.ForeignProc) *pb.GpuSample {
	s := &pb.GpuSample{UtilPct: util, MemoryUsedMb: make([]uint32, len(util))}
	for i := range s.MemoryUsedMb {
		s.MemoryUsedMb[i] = uint32(1000 * (i + 1))
	}
	if foreign != nil {
		s.Foreign = &pb.ForeignList{Procs: foreign}
	}
	return s
}

// A foreign process on GPU 1 keeps new runs off it: one 1-GPU run gets GPU
// 0, a second waits with gpu_foreign; the process goes and it starts. A
// process appearing on a running run's GPU warns the run; the worker view
// shows it (with its owner), and the run gets its GPU series.
func TestGPUForeignProcesses(t *testing.T) {
	// The test's worker beats only when it has something to say.
	h := newHarness(t, func(c *Config) { c.HeartbeatTTL, c.LeaseTTL = time.Minute, time.Minute })
	p := dial(t, h.m.Addr())
	p.hello("w-gpu", 2, 2)
	seq := uint64(0)
	var refs []*pb.RunRef
	beat := func(s *pb.GpuSample) {
		seq++
		p.send(&pb.Heartbeat{Seq: seq, Runs: refs, Gpus: s})
		p.expect(&pb.HeartbeatAck{})
	}
	bob := &pb.ForeignProc{GpuIndex: 1, Pid: 4242, User: "bob", Command: "python notebook.py", MemoryMb: 1200}
	beat(gpuSample([]uint32{0, 90}, bob))
	testutil.WaitFor(t, 10*time.Second, "the foreign process in the worker's view", func() bool {
		ws := h.m.Workers()
		return len(ws) == 1 && len(ws[0].GPUs[1].Foreign) == 1 && ws[0].GPUs[1].Foreign[0].User == "bob"
	})

	a := h.submit(t, 1, "a")
	exA := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if exA.TaskId != a.ID || len(exA.GpuIndices) != 1 || exA.GpuIndices[0] != 0 {
		t.Fatalf("first run: %v", exA)
	}
	refs = append(refs, &pb.RunRef{TaskId: a.ID, Attempt: exA.Attempt, Fence: exA.Fence})
	p.send(&pb.TaskStarted{TaskId: a.ID, Attempt: exA.Attempt, Fence: exA.Fence, Pid: 1})
	b := h.submit(t, 1, "b")
	testutil.WaitFor(t, 10*time.Second, "the second run waiting with gpu_foreign", func() bool {
		info := h.m.Explain(context.Background(), []core.Task{h.task(t, b.ID)})[b.ID]
		return info.Code == plan.CodeGPUForeign
	})
	if got := h.task(t, b.ID); got.Status != core.StatusQueued {
		t.Fatalf("second run %s", got.Status)
	}
	testutil.WaitFor(t, 10*time.Second, "the first run RUNNING", func() bool { return h.task(t, a.ID).Status == core.StatusRunning })

	// Bob's process moves to GPU 0, which run a holds: a gets a warning; GPU
	// 1 is free again and b starts there.
	bob0 := &pb.ForeignProc{GpuIndex: 0, Pid: 4242, User: "bob", Command: "python notebook.py", MemoryMb: 1200}
	beat(gpuSample([]uint32{50, 0}, bob0))
	exB := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if exB.TaskId != b.ID || exB.GpuIndices[0] != 1 {
		t.Fatalf("second run: %v", exB)
	}
	refs = append(refs, &pb.RunRef{TaskId: b.ID, Attempt: exB.Attempt, Fence: exB.Fence})
	testutil.WaitFor(t, 10*time.Second, "a gpu_foreign warning on the first run", func() bool {
		for _, w := range h.task(t, a.ID).Warnings {
			if w.Code == gpuwatch.CodeForeign && strings.Contains(w.Message, "pid 4242 of user bob") &&
				!strings.Contains(w.Message, "notebook") {
				return true
			}
		}
		return false
	})
	beat(gpuSample([]uint32{60, 0})) // no foreign list: unchanged
	testutil.WaitFor(t, 10*time.Second, "the run's GPU series", func() bool {
		ms, err := h.st.Metrics(context.Background(), a.ID, []string{gpuwatch.MetricUtilization, gpuwatch.MetricMemory})
		return err == nil && len(ms[gpuwatch.MetricUtilization]) >= 1 && len(ms[gpuwatch.MetricMemory]) >= 1 && ms[gpuwatch.MetricMemory][0][1] == 1000
	})
	if n := len(h.task(t, a.ID).Warnings); n != 1 {
		t.Fatalf("%d warnings, want one per foreign pid", n)
	}
	ws := h.m.Workers()
	g0 := ws[0].GPUs[0]
	if g0.TaskID != a.ID || g0.Utilization == nil || *g0.Utilization != 60 || *g0.MemoryUsedMB != 1000 || len(g0.Foreign) != 1 {
		t.Fatalf("GPU 0 in the view: %+v", g0)
	}
	if u := ws[0].ForUser().GPUs[0].Foreign[0]; u.User != "" || u.Command != "" || u.PID != 4242 {
		t.Fatalf("a user's view of the foreign process: %+v", u)
	}
}

// A run whose GPUs stay under IDLE_GPU_UTIL for IDLE_GPU_SECONDS gets the
// idle_gpu warning, and with IDLE_GPU_ACTION=cancel a CancelTask; its end
// is CANCELLED with "idle GPU for N s".
func TestIdleGPUCancel(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.GPUWatch = gpuwatch.Config{IdleUtilPct: 5, IdleAfter: time.Second, IdleCancel: true, MaxGap: time.Minute}
	})
	p := dial(t, h.m.Addr())
	p.hello("w-idle", 1, 1)
	run := h.submit(t, 1, "sleep")
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.send(&pb.TaskStarted{TaskId: run.ID, Attempt: ex.Attempt, Fence: ex.Fence, Pid: 1})
	testutil.WaitFor(t, 10*time.Second, "RUNNING", func() bool { return h.task(t, run.ID).Status == core.StatusRunning })
	refs := []*pb.RunRef{{TaskId: run.ID, Attempt: ex.Attempt, Fence: ex.Fence}}
	var ct *pb.CancelTask
	seq := uint64(0)
	// A heartbeat with an idle sample at each poll, as a worker sends them.
	testutil.Eventually(t, 10*time.Second, func() (bool, string) {
		seq++
		p.send(&pb.Heartbeat{Seq: seq, Runs: refs, Gpus: gpuSample([]uint32{2})})
		for {
			m, err := p.read()
			if err != nil {
				t.Fatal(err)
			}
			if c, ok := m.(*pb.CancelTask); ok {
				ct = c
				return true, ""
			}
			if _, ok := m.(*pb.HeartbeatAck); ok {
				return false, "no CancelTask for a run idle for more than IDLE_GPU_SECONDS"
			}
		}
	})
	if ct.TaskId != run.ID {
		t.Fatalf("CancelTask %v", ct)
	}
	p.send(&pb.TaskFinished{TaskId: run.ID, Attempt: ex.Attempt, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_CANCELLED, Signal: "SIGTERM", ExitCode: -1})
	p.expect(&pb.TaskFinishedAck{})
	got := h.task(t, run.ID)
	if got.Status != core.StatusCancelled || !strings.HasPrefix(got.Error, "idle GPU for ") || !strings.HasSuffix(got.Error, " s") {
		t.Fatalf("%s %q", got.Status, got.Error)
	}
	testutil.WaitFor(t, 10*time.Second, "the idle_gpu warning", func() bool {
		for _, w := range h.task(t, run.ID).Warnings {
			if w.Code == gpuwatch.CodeIdle && strings.Contains(w.Message, "GPU 0 idle (under 5% utilisation)") {
				return true
			}
		}
		return false
	})
}

// A worker's sample is bounded and checked before the master keeps it: a
// utilisation over 100 or a memory of "not reported" is unknown, values
// beyond Hello's GPUs are ignored, a process on a GPU the worker did not
// advertise is left out, long text is cut on a character boundary, and a
// sample without a foreign list keeps the last one.
func TestTakeGPUSampleBounds(t *testing.T) {
	sess := &session{gpuIdx: []int{0, 3}}
	long := strings.Repeat("é", 300)
	procs := []*pb.ForeignProc{{GpuIndex: 7, Pid: 1}, {GpuIndex: 3, Pid: 2, User: long, Command: long + "\xff", MemoryMb: wireMemUnknown}}
	for range 40 {
		procs = append(procs, &pb.ForeignProc{GpuIndex: 0, Pid: 9})
	}
	problem := "nvidia-smi failed"
	sess.takeGPUSample(&pb.GpuSample{UtilPct: []uint32{300, 40, 77}, MemoryUsedMb: []uint32{wireMemUnknown},
		Foreign: &pb.ForeignList{Procs: procs}, Problem: &problem}, time.Now())
	st := &sess.gpuSt
	if st.util[0] != gpuwatch.Unknown || st.util[1] != 40 || st.mem[0] != gpuwatch.Unknown || st.mem[1] != gpuwatch.Unknown {
		t.Fatalf("values %v %v", st.util, st.mem)
	}
	if len(st.foreign[0]) != maxForeignPerGPU || len(st.foreign[1]) != 1 {
		t.Fatalf("foreign %d/%d", len(st.foreign[0]), len(st.foreign[1]))
	}
	p := st.foreign[1][0]
	if len(p.User) > maxForeignUser || len(p.Command) > maxForeignCommand || !utf8.ValidString(p.Command) || p.MemoryMB != gpuwatch.Unknown {
		t.Fatalf("process %+v", p)
	}
	sess.takeGPUSample(&pb.GpuSample{UtilPct: []uint32{1}}, time.Now())
	if st2 := &sess.gpuSt; st2.seq != 2 || len(st2.foreign[1]) != 1 || st2.problem != problem || st2.util[1] != gpuwatch.Unknown {
		t.Fatalf("second sample %+v", st2)
	}
	if got := sess.foreignGPUs(); len(got) != 2 || got[1] != 3 {
		t.Fatalf("foreign GPUs %v", got)
	}
}

// The runs' use of cores and memory in a worker's samples becomes their
// series sys/cpu_cores and sys/memory_mb, stepped by the sample's Unix
// second: on a worker without GPUs (samples of its runs alone) for a run
// without GPUs. An entry for a run the worker does not hold is dropped.
func TestUsageSeries(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.HeartbeatTTL, c.LeaseTTL = time.Minute, time.Minute })
	p := dial(t, h.m.Addr())
	p.hello("w-cpu", 1, 0)
	run := h.submit(t, 0, "train")
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.send(&pb.TaskStarted{TaskId: run.ID, Attempt: ex.Attempt, Fence: ex.Fence, Pid: 1})
	testutil.WaitFor(t, 10*time.Second, "RUNNING", func() bool { return h.task(t, run.ID).Status == core.StatusRunning })
	refs := []*pb.RunRef{{TaskId: run.ID, Attempt: ex.Attempt, Fence: ex.Fence}}
	other := core.NewTaskID()
	p.send(&pb.Heartbeat{Seq: 1, Runs: refs, Gpus: &pb.GpuSample{Runs: []*pb.RunUsage{
		{TaskId: run.ID, CpuMillicores: 1020, MemoryMb: 812}, {TaskId: other, CpuMillicores: 4000, MemoryMb: 1}}}})
	p.expect(&pb.HeartbeatAck{})
	names := []string{gpuwatch.MetricCPUCores, gpuwatch.MetricMemoryRun}
	var ms map[string][][2]float64
	testutil.Eventually(t, 10*time.Second, func() (bool, string) {
		var err error
		ms, err = h.st.Metrics(context.Background(), run.ID, names)
		return err == nil && len(ms[names[0]]) == 1 && len(ms[names[1]]) == 1, "no usage series yet"
	})
	c, m := ms[names[0]][0], ms[names[1]][0]
	if c[1] != 1.02 || m[1] != 812 || c[0] != m[0] || time.Since(time.Unix(int64(c[0]), 0)) > time.Minute {
		t.Fatalf("points %v %v: want 1.02 cores and 812 MiB at the sample's Unix second", c, m)
	}
	if other, _ := h.st.Metrics(context.Background(), other, names); len(other) != 0 {
		t.Fatalf("a run the worker does not hold got %v", other)
	}
}

// A 1-GPU run of priority 5 waits while a foreign process holds GPU 1 and a
// preemptible run GPU 0: the preemptible run is stopped for it, the foreign
// GPU being no room (issue 32: it waited as gpu_foreign, as if it fit).
func TestPreemptionPastAForeignGPU(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.HeartbeatTTL, c.LeaseTTL = time.Minute, time.Minute })
	p := dial(t, h.m.Addr())
	p.hello("w-gpu", 2, 2)
	bob := &pb.ForeignProc{GpuIndex: 1, Pid: 4242, User: "bob", Command: "python notebook.py", MemoryMb: 1200}
	p.send(&pb.Heartbeat{Seq: 1, Gpus: gpuSample([]uint32{0, 90}, bob)})
	p.expect(&pb.HeartbeatAck{})
	testutil.WaitFor(t, 10*time.Second, "the foreign process in the worker's view", func() bool {
		ws := h.m.Workers()
		return len(ws) == 1 && len(ws[0].GPUs[1].Foreign) == 1
	})
	victim := core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: []string{"x"}, GPUs: 1, Attempt: 1,
		TraceID: core.NewTraceID(), CreatedAt: time.Now(), Preemptible: true}
	if err := h.st.CreateTask(context.Background(), &victim); err != nil {
		t.Fatal(err)
	}
	h.m.Notify()
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex.TaskId != victim.ID || len(ex.GpuIndices) != 1 || ex.GpuIndices[0] != 0 {
		t.Fatalf("first run: %v", ex)
	}
	p.send(&pb.TaskStarted{TaskId: victim.ID, Attempt: 1, Fence: ex.Fence, Pid: 42})
	testutil.WaitFor(t, 10*time.Second, "the victim RUNNING", func() bool { return h.task(t, victim.ID).Status == core.StatusRunning })
	urgent := core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: []string{"x"}, GPUs: 1, Attempt: 1,
		Priority: 5, TraceID: core.NewTraceID(), CreatedAt: time.Now()}
	if err := h.st.CreateTask(context.Background(), &urgent); err != nil {
		t.Fatal(err)
	}
	h.m.Notify()
	h.m.preempt.tick(context.Background()) // what the next tick does, now
	ct := p.expect(&pb.CancelTask{}).(*pb.CancelTask)
	if ct.TaskId != victim.ID || !strings.Contains(ct.Reason, "preempted by "+urgent.ID) {
		t.Fatalf("CancelTask %v, want the victim's for %s", ct, urgent.ID)
	}
}
