package dispatch

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/lease"
	"github.com/rlsched/rlsched/store"
)

// runOf queues a run of u needing gpus GPUs, created at created.
func (h *harness) runOf(t *testing.T, u core.User, gpus int, created time.Time) core.Task {
	t.Helper()
	task := core.Task{ID: core.NewTaskID(), UserID: u.ID, Command: []string{"x"}, GPUs: gpus,
		Attempt: 1, MaxRetries: 1, TraceID: core.NewTraceID(), Status: core.StatusQueued, CreatedAt: created}
	if err := h.st.CreateTask(context.Background(), &task); err != nil {
		t.Fatal(err)
	}
	return task
}

func (h *harness) newUser(t *testing.T, name string) core.User {
	t.Helper()
	u := core.User{Username: name, PasswordHash: "x"}
	if err := h.st.CreateUser(context.Background(), &u); err != nil {
		t.Fatal(err)
	}
	return u
}

// Alice's runs were queued first but she has used GPUs for an hour, Bob
// not at all: the one free GPU goes to Bob's run.
func TestFairShareServesTheLighterUser(t *testing.T) {
	h := newClockedHarness(t, nil)
	alice, bob := h.owner, h.newUser(t, "bob")
	if err := h.st.AddUsage(context.Background(), []store.UsageCharge{{UserID: alice.ID, GPUSeconds: 3600, At: h.clock.Now()}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	base := h.clock.Now().Add(-time.Minute)
	a1 := h.runOf(t, alice, 1, base)
	a2 := h.runOf(t, alice, 1, base.Add(time.Second))
	b1 := h.runOf(t, bob, 1, base.Add(2*time.Second))
	explainNow(t, h.m, []core.Task{a1, a2, b1}, map[string]core.QueueInfo{
		b1.ID: {Position: 1, Reason: "no worker is connected", Code: plan.CodeNoWorker},
		a1.ID: {Position: 2, Reason: "no worker is connected", Code: plan.CodeNoWorker},
		a2.ID: {Position: 3, Reason: "no worker is connected", Code: plan.CodeNoWorker},
	})
	p := dial(t, h.m.Addr())
	p.hello("w", 0, 1)
	if ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask); ex.TaskId != b1.ID {
		t.Fatalf("started %s, want Bob's %s (Alice's %s and %s came first but she used more)", ex.TaskId, b1.ID, a1.ID, a2.ID)
	}
}

// A quota of 1 GPU lets one of Alice's runs start; the other waits with
// the reason quota although a GPU is free, and DEFAULT_USER_GPU_QUOTA caps
// a user without a quota of their own.
func TestQuotaHoldsAtThePlanner(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.Policy.DefaultGPUQuota = 1 })
	alice := h.owner
	bob := h.newUser(t, "bob")
	three := 3
	if err := h.st.SetQuota(context.Background(), bob.ID, core.Quota{GPUs: &three}); err != nil {
		t.Fatal(err)
	}
	base := h.clock.Now().Add(-time.Minute)
	a1 := h.runOf(t, alice, 1, base)
	a2 := h.runOf(t, alice, 1, base.Add(time.Second))
	b1 := h.runOf(t, bob, 2, base.Add(2*time.Second))
	p := dial(t, h.m.Addr())
	p.hello("w", 0, 4)
	h.m.Notify()
	got := map[string]bool{}
	for range 2 {
		got[p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask).TaskId] = true
	}
	if !got[a1.ID] || !got[b1.ID] {
		t.Fatalf("started %v, want %s and %s", got, a1.ID, b1.ID)
	}
	explainNow(t, h.m, []core.Task{a2}, map[string]core.QueueInfo{
		a2.ID: {Position: 1, Reason: "needs 1 GPU; owner has 1 of a quota of 1 GPUs active", Code: plan.CodeQuota},
	})
	if st := h.task(t, a2.ID).Status; st != core.StatusQueued {
		t.Fatalf("Alice's second run is %s past her quota", st)
	}
	// The leases carry the charges, which the claims of every master check.
	if g, r, err := h.m.ls.Charged(context.Background(), strconv.FormatInt(alice.ID, 10)); err != nil || g != 1 || r != 1 {
		t.Fatalf("alice's charges: %d GPUs, %d runs, %v; want 1, 1", g, r, err)
	}
	if g, r, _ := h.m.ls.Charged(context.Background(), strconv.FormatInt(bob.ID, 10)); g != 2 || r != 1 {
		t.Fatalf("bob's charges: %d GPUs, %d runs; want 2, 1", g, r)
	}
}

// Another master's claim of Alice's run (charged in the shared lease
// backend, not yet DISPATCHED in the store) holds her quota: the planner,
// reading the store, places her run, and the claim refuses it.
func TestQuotaHoldsAtTheClaim(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.Policy.DefaultGPUQuota = 1 })
	alice := h.owner
	if _, err := h.m.ls.ClaimCharged(context.Background(), "elsewhere", "w-other", time.Hour,
		lease.Charge{User: strconv.FormatInt(alice.ID, 10), GPUs: 1, MaxGPUs: 1, MaxRuns: -1}); err != nil {
		t.Fatal(err)
	}
	a1 := h.runOf(t, alice, 1, h.clock.Now().Add(-time.Minute))
	p := dial(t, h.m.Addr())
	p.hello("w", 0, 2)
	h.m.Notify()
	testutil.WaitFor(t, 10*time.Second, "the claim is refused", func() bool { return strings.Contains(h.logs.String(), "quota") })
	if st := h.task(t, a1.ID).Status; st != core.StatusQueued {
		t.Fatalf("Alice's run is %s, past a quota another master's claim holds", st)
	}
}

// A preemptible run of priority 0 holding both GPUs is stopped, with its
// own grace, for a run of priority 5 that fits nowhere else; its end is a
// preemption (QUEUED again, attempt 2, not a retry), and the urgent run
// starts on the GPUs it freed. A run that is not preemptible is never
// stopped.
func TestPreemption(t *testing.T) {
	h := newClockedHarness(t, nil)
	base := h.clock.Now().Add(-time.Minute)
	victim := core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: []string{"x"}, GPUs: 2, Attempt: 1, MaxRetries: 0,
		TraceID: core.NewTraceID(), CreatedAt: base, Preemptible: true, PreemptGraceSeconds: 45}
	if err := h.st.CreateTask(context.Background(), &victim); err != nil {
		t.Fatal(err)
	}
	p := dial(t, h.m.Addr())
	p.hello("w", 0, 2)
	h.m.Notify()
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex.TaskId != victim.ID {
		t.Fatalf("started %s, want the victim", ex.TaskId)
	}
	p.send(&pb.TaskStarted{TaskId: victim.ID, Attempt: 1, Fence: ex.Fence, Pid: 42})
	testutil.WaitFor(t, 10*time.Second, "the victim RUNNING", func() bool { return h.task(t, victim.ID).Status == core.StatusRunning })

	urgent := core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: []string{"x"}, GPUs: 2, Attempt: 1, MaxRetries: 1,
		Priority: 5, TraceID: core.NewTraceID(), CreatedAt: h.clock.Now()}
	if err := h.st.CreateTask(context.Background(), &urgent); err != nil {
		t.Fatal(err)
	}
	h.m.Notify()
	ct := p.expect(&pb.CancelTask{}).(*pb.CancelTask)
	if ct.TaskId != victim.ID || ct.Fence != ex.Fence || ct.GraceMs != 45000 || !strings.Contains(ct.Reason, "preempted by "+urgent.ID) {
		t.Fatalf("CancelTask %v", ct)
	}
	p.send(&pb.TaskFinished{TaskId: victim.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_CANCELLED, Signal: "SIGTERM", ExitCode: -1})
	ex2 := p.expectEach(&pb.TaskFinishedAck{}, &pb.ExecuteTask{})[1].(*pb.ExecuteTask)
	got := h.task(t, victim.ID)
	if got.Status != core.StatusQueued || got.Attempt != 2 || got.Preemptions != 1 || got.PreemptedAt == nil ||
		!strings.Contains(got.Error, "preempted by "+urgent.ID+" (priority 5)") {
		t.Fatalf("the victim after its preemption: %+v", got)
	}
	if ex2.TaskId != urgent.ID {
		t.Fatalf("started %s on the freed GPUs, want the urgent run %s", ex2.TaskId, urgent.ID)
	}
	// The urgent run is not preemptible: a third, higher run waits.
	p.send(&pb.TaskStarted{TaskId: urgent.ID, Attempt: 1, Fence: ex2.Fence, Pid: 43})
	higher := core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: []string{"x"}, GPUs: 2, Attempt: 1,
		Priority: 9, TraceID: core.NewTraceID(), CreatedAt: h.clock.Now()}
	if err := h.st.CreateTask(context.Background(), &higher); err != nil {
		t.Fatal(err)
	}
	h.m.Notify()
	h.m.preempt.tick(context.Background()) // what the next tick does, now
	_ = p.c.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
	for {
		m, _, err := codec.ReadFrame(p.r, codec.DefaultMaxBody, nil, p.keys.Recv)
		if err != nil {
			break // nothing more: no CancelTask
		}
		if c, ok := m.(*pb.CancelTask); ok {
			t.Fatalf("a run that is not preemptible was stopped: %v", c)
		}
	}
}

// A run waiting for cores (pendingCode cpu) preempts a preemptible CPU-only
// run of lower priority holding them, and starts on the cores it freed
// (issue 26).
func TestPreemptionForCores(t *testing.T) {
	h := newClockedHarness(t, nil)
	victim := core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: []string{"x"}, CPUs: 2, MemoryMB: 512, Attempt: 1,
		TraceID: core.NewTraceID(), CreatedAt: h.clock.Now().Add(-time.Minute), Preemptible: true}
	if err := h.st.CreateTask(context.Background(), &victim); err != nil {
		t.Fatal(err)
	}
	p := dial(t, h.m.Addr())
	p.send(&pb.Hello{WorkerId: "w", Host: "test", Slots: 2, CpuMillis: 2000, MemoryMb: 4096})
	p.expect(&pb.HelloAck{})
	h.m.Notify()
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex.TaskId != victim.ID || ex.CpuMillis != 2000 {
		t.Fatalf("started %v, want the victim with 2 cores", ex)
	}
	p.send(&pb.TaskStarted{TaskId: victim.ID, Attempt: 1, Fence: ex.Fence, Pid: 42})
	testutil.WaitFor(t, 10*time.Second, "the victim RUNNING", func() bool { return h.task(t, victim.ID).Status == core.StatusRunning })

	urgent := core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: []string{"x"}, CPUs: 1.5, MemoryMB: 512, Attempt: 1,
		Priority: 5, TraceID: core.NewTraceID(), CreatedAt: h.clock.Now()}
	if err := h.st.CreateTask(context.Background(), &urgent); err != nil {
		t.Fatal(err)
	}
	h.m.Notify()
	ct := p.expect(&pb.CancelTask{}).(*pb.CancelTask)
	if ct.TaskId != victim.ID || !strings.Contains(ct.Reason, "preempted by "+urgent.ID) {
		t.Fatalf("CancelTask %v", ct)
	}
	p.send(&pb.TaskFinished{TaskId: victim.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_CANCELLED, Signal: "SIGTERM", ExitCode: -1})
	ex2 := p.expectEach(&pb.TaskFinishedAck{}, &pb.ExecuteTask{})[1].(*pb.ExecuteTask)
	if ex2.TaskId != urgent.ID || ex2.CpuMillis != 1500 {
		t.Fatalf("started %v on the freed cores, want the urgent run %s", ex2, urgent.ID)
	}
}

// The standing a pass was given is never changed under it: the runs this
// master places and ends move a copy, floored at zero, and users the
// cache lacks are left to the next read.
func TestStandingMovedReplacesTheMap(t *testing.T) {
	in := &planInputs{}
	in.standingMoved([]userMove{{userID: 1, gpus: 2, runs: 1}}) // nothing cached: nothing to move
	if in.standing.users != nil {
		t.Fatalf("a move made a standing: %v", in.standing.users)
	}
	given := map[int64]plan.User{1: {Name: "alice", ActiveGPUs: 1, ActiveRuns: 1}}
	in.standing.users, in.standing.lent = given, true // as users() hands it out
	in.standingMoved([]userMove{{userID: 1, gpus: 2, runs: 1}, {userID: 9, gpus: 1, runs: 1}})
	if got := in.standing.users[1]; got.ActiveGPUs != 3 || got.ActiveRuns != 2 {
		t.Fatalf("after placing a 2-GPU run: %+v", got)
	}
	if given[1].ActiveGPUs != 1 || len(in.standing.users) != 1 {
		t.Fatalf("the map handed out changed (%+v) or an unknown user was added (%v)", given[1], in.standing.users)
	}
	in.standingMoved([]userMove{{userID: 1, gpus: 2, runs: -1}, {userID: 1, gpus: 2, runs: -1}, {userID: 1, gpus: 2, runs: -1}})
	if got := in.standing.users[1]; got.ActiveGPUs != 0 || got.ActiveRuns != 0 {
		t.Fatalf("more ends than runs: %+v, want 0 and 0", got)
	}
}
