package main

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/rlsched/rlsched/sim"
)

// The slice in bench/testdata is read whole: 374 pods that ran, 179 of
// them on a share of a GPU, every share in hundredths.
func TestReplaySliceReads(t *testing.T) {
	ps, err := sim.ReadOpenBPods(bytes.NewReader(openbSlice))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Pods) != 374 || len(ps.Skipped) != 26 || countShares(ps.Pods) != 179 {
		t.Fatalf("%d pods, %d skipped, %d shares", len(ps.Pods), len(ps.Skipped), countShares(ps.Pods))
	}
	for _, p := range ps.Pods {
		if p.Shares() && p.GPUMilli%10 != 0 {
			t.Errorf("%s: %d milli-GPUs is not in hundredths", p.Name, p.GPUMilli)
		}
	}
}

// summariseReplay counts a GPU over-committed only when its runs overlap
// past what it holds; a run started in the millisecond its GPU's last run
// ended is not an overlap.
func TestReplayOvercommitFromTheStore(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms float64) *time.Time { x := t0.Add(time.Duration(ms * float64(time.Millisecond))); return &x }
	run := func(id string, gpus float64, worker string, gpu int, from, to float64) replayTask {
		return replayTask{ID: id, Name: id, Status: "SUCCEEDED", GPUs: gpus, Worker: worker, GPUIndices: []int{gpu},
			CreatedAt: t0, StartedAt: at(from), FinishedAt: at(to)}
	}
	pods := []sim.Pod{{Name: "a", NumGPU: 1, GPUMilli: 500}, {Name: "b", NumGPU: 1, GPUMilli: 500}, {Name: "c", NumGPU: 1, GPUMilli: 1000}}
	for _, c := range []struct {
		name  string
		tasks []replayTask
		over  int64
	}{
		{"two halves", []replayTask{run("a", 0.5, "g2-000000", 0, 0, 100), run("b", 0.5, "g2-000000", 0, 50, 150)}, 0},
		{"a half and 0.6", []replayTask{run("a", 0.5, "g2-000000", 0, 0, 100), run("b", 0.6, "g2-000000", 0, 50, 150)}, 1},
		{"whole after a share, same millisecond", []replayTask{run("a", 0.5, "g2-000000", 0, 0, 100.7), run("c", 1, "g2-000000", 0, 100.2, 200)}, 0},
		{"whole beside a share", []replayTask{run("a", 0.5, "g2-000000", 0, 0, 100), run("c", 1, "g2-000000", 0, 99, 200)}, 1},
		{"other GPUs", []replayTask{run("a", 0.5, "g2-000000", 0, 0, 100), run("c", 1, "g2-000000", 1, 0, 100), run("b", 1, "t4-000000", 0, 0, 100)}, 0},
	} {
		r := summariseReplay(pods, c.tasks, t0, t0.Add(200*time.Millisecond), t0.Add(300*time.Millisecond), 1000)
		if r.overStore != c.over {
			t.Errorf("%s: %d over-commits (%s), want %d", c.name, r.overStore, r.overWhy, c.over)
		}
	}
	// Allocation counts what the pods asked for; held, what the runs held.
	r := summariseReplay(pods, []replayTask{run("a", 1, "g2-000000", 0, 0, 200)}, t0, t0.Add(200*time.Millisecond), t0.Add(300*time.Millisecond), 1000)
	if math.Abs(r.alloc-0.5/20) > 1e-9 || math.Abs(r.held-1.0/20) > 1e-9 || r.started != 1 || r.meanWait != 0 {
		t.Errorf("a rounded-up half: %+v", r)
	}
}
