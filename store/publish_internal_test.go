package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestRunLocks: a run's lock holds back only writes of that run, a batch
// locks each run once, and no lock outlives its holders.
func TestRunLocks(t *testing.T) {
	var l runLocks
	unlockA := l.lock("a")
	// Other runs, "a"'s stripe-mates under the old striping included,
	// do not wait for "a".
	l.lockAll([]string{"c", "b", "c"})()
	got := make(chan struct{})
	go func() {
		defer l.lock("a")()
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("a second holder of run a did not wait")
	case <-time.After(20 * time.Millisecond):
	}
	unlockA()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter of run a never got the lock")
	}
	testutil.Eventually(t, 5*time.Second, func() (bool, string) {
		l.mu.Lock()
		n := len(l.m)
		l.mu.Unlock()
		return n == 0, fmt.Sprintf("%d locks left after every unlock", n)
	})
}

// TestFixedGenerations: the remembered runs are bounded by two generations,
// and a run looked at since the last turn survives the next one, however
// many runs were remembered meanwhile.
func TestFixedGenerations(t *testing.T) {
	ts := Publishing(nil, nil).(*publisher)
	keep := &core.Task{ID: "keep", Name: "kept"}
	ts.remember(keep)
	for i := range 5 * fixedGen {
		ts.remember(&core.Task{ID: fmt.Sprint("run-", i)})
		if i%(fixedGen/2) == 0 && ts.known("keep") == nil {
			t.Fatalf("a run looked at every half generation was dropped after %d others", i)
		}
		if n := len(ts.fixed) + len(ts.older); n > 2*fixedGen {
			t.Fatalf("%d runs remembered, more than two generations (%d)", n, 2*fixedGen)
		}
	}
	if f := ts.known("run-0"); f != nil {
		t.Fatal("a run not looked at for several generations is still remembered")
	}
	if f := ts.known("keep"); f == nil || f.Name != "kept" {
		t.Fatalf("the kept run is %+v", f)
	}
	ts.forget("keep")
	if ts.known("keep") != nil {
		t.Fatal("a forgotten run is still remembered")
	}
}

// TestFixedKeepsWhereARunMayGo: an event built from a remembered run
// carries its share, GPU memory and type, constraints and image (without
// them a fractional run's events said it asked for no GPU).
func TestFixedKeepsWhereARunMayGo(t *testing.T) {
	ts := Publishing(nil, nil).(*publisher)
	in := &core.Task{ID: "frac", GPUFraction: 0.25, GPUMemoryMB: 4096, GPUType: []string{"A100"},
		Constraints: map[string]string{"pool": "a100"}, Image: "docker.io/library/python:3.12"}
	v := written(ts.remember(in), &core.Task{Status: core.StatusRunning})
	in.GPUType[0], in.Constraints["pool"] = "changed", "changed" // the remembered copy is its own
	if v.GPUFraction != 0.25 || v.GPUMemoryMB != 4096 || len(v.GPUType) != 1 || v.GPUType[0] != "A100" ||
		v.Constraints["pool"] != "a100" || v.Image != "docker.io/library/python:3.12" || v.Status != core.StatusRunning {
		t.Fatalf("the event's run: %+v", v)
	}
}
