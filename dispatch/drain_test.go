package dispatch

import (
	"errors"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestDrainWorker: a drained worker keeps its run, shows DRAINING and is
// given no new one (which goes to another worker, or waits); undrained, it
// takes runs again.
func TestDrainWorker(t *testing.T) {
	h := newClockedHarness(t, nil)
	p1 := dial(t, h.m.Addr())
	p1.hello("w1", 2, 0)
	first := h.submit(t, 0, "sleep")
	ex := p1.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex.TaskId != first.ID {
		t.Fatalf("ExecuteTask %v", ex)
	}
	info, err := h.m.DrainWorker("w1", true)
	if err != nil || info.State != core.WorkerDraining || len(info.RunningTasks) != 1 {
		t.Fatalf("DrainWorker: %+v, %v", info, err)
	}
	if _, err := h.m.DrainWorker("nobody", true); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("DrainWorker(unknown): %v", err)
	}
	second := h.submit(t, 0, "sleep")
	p2 := dial(t, h.m.Addr())
	p2.hello("w2", 1, 0)
	if ex := p2.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask); ex.TaskId != second.ID {
		t.Fatalf("w2 got %v", ex)
	}
	// second went to w2 although w1, draining, had a free slot since its
	// submission; w2 is full now, so the next run waits for w1.
	third := h.submit(t, 0, "sleep")
	if _, err := h.m.DrainWorker("w1", false); err != nil {
		t.Fatal(err)
	}
	if ex := p1.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask); ex.TaskId != third.ID {
		t.Fatalf("w1 after undrain got %v", ex)
	}
}

// TestForgetWorker: only a DOWN worker can be forgotten; DOWN workers are
// dropped by themselves after ForgetAfter, and a worker that comes back is
// listed again.
func TestForgetWorker(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.ForgetAfter = time.Hour })
	p := dial(t, h.m.Addr())
	p.hello("w1", 1, 0)
	if err := h.m.ForgetWorker("w1"); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("forgetting an IDLE worker: %v", err)
	}
	if err := h.m.ForgetWorker("nobody"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("forgetting an unknown worker: %v", err)
	}
	state := func(id string) core.WorkerState {
		for _, w := range h.m.Workers() {
			if w.ID == id {
				return w.State
			}
		}
		return ""
	}
	p.c.Close()
	testutil.WaitFor(t, 10*time.Second, "w1 DOWN", func() bool { return state("w1") == core.WorkerDown })
	if err := h.m.ForgetWorker("w1"); err != nil {
		t.Fatal(err)
	}
	if s := state("w1"); s != "" {
		t.Fatalf("a forgotten worker is listed %s", s)
	}

	p = dial(t, h.m.Addr())
	p.hello("w2", 1, 0)
	p.c.Close()
	testutil.WaitFor(t, 10*time.Second, "w2 DOWN", func() bool { return state("w2") == core.WorkerDown })
	h.m.forgetDown()
	if state("w2") != core.WorkerDown {
		t.Fatal("a worker down for less than ForgetAfter was forgotten")
	}
	h.clock.Advance(time.Hour + time.Second)
	h.m.forgetDown()
	if s := state("w2"); s != "" {
		t.Fatalf("a worker down for longer than ForgetAfter is still listed %s", s)
	}
	p = dial(t, h.m.Addr())
	p.hello("w2", 1, 0)
	if s := state("w2"); s != core.WorkerIdle {
		t.Fatalf("a forgotten worker that came back: %q", s)
	}
}
