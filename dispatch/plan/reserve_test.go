package plan

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/rlsched/rlsched/core"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// waiting is a queued run of gpus GPUs queued at t0 + at seconds.
func waiting(id string, gpus, at int) core.Task {
	t := queued(id, gpus, 0)
	t.UpdatedAt = t0.Add(time.Duration(at) * time.Second)
	return t
}

// A 4-GPU run that has waited past the reservation holds the worker with
// the most free GPUs; a younger 1-GPU run behind it starts elsewhere or
// waits, and says why.
func TestReservation(t *testing.T) {
	s := Snapshot{Connected: 2, MaxGPUs: 4, Free: []Worker{
		{ID: "a", FreeGPUs: []int{2, 3}, GPUs: 4}, {ID: "b", FreeGPUs: []int{1}, GPUs: 4}}}
	q := []core.Task{waiting("big", 4, 0), waiting("s1", 1, 10), waiting("s2", 1, 11), waiting("s3", 1, 12)}

	// Before the reservation: backfill gives both small runs the free GPUs.
	s.ReserveBefore = t0 // nothing queued before it
	if got := ids(Place(s, q)); !slices.Equal(got, []string{"s1", "s2", "s3"}) {
		t.Fatalf("without a reservation placed %v", got)
	}
	s.ReserveBefore = t0.Add(5 * time.Second)
	res := Plan(s, q)
	if got := ids(res.Placements); !slices.Equal(got, []string{"s1"}) {
		t.Fatalf("with big reserving placed %v, want [s1] (on b; a is held)", got)
	}
	if res.Placements[0].Worker != "b" {
		t.Fatalf("s1 on %s, want b", res.Placements[0].Worker)
	}
	want := map[string]core.QueueInfo{
		"big": {Position: 1, Code: CodeResources, Reason: "needs 4 GPUs and has waited long: the GPUs of a are held for it as they free (2 of 4 free)"},
		"s2":  {Position: 3, Code: CodePriority, Reason: "the free GPUs it would fit in are held for big, which has waited longer than the backfill allows"},
	}
	for id, w := range want {
		if got := res.Waiting[id]; got != w {
			t.Errorf("%s: got %+v\nwant %+v", id, got, w)
		}
	}
}

// A run asking for cores and no GPU that has waited past the reservation
// holds the free cores of the worker with enough in all, one without GPUs
// first; a younger run that would fit in them waits and says why, and the
// long-waiting run says what it holds (issue 26).
func TestReservationCores(t *testing.T) {
	s := Snapshot{Connected: 2, MaxGPUs: 2, MaxSlots: 4, Free: []Worker{
		{ID: "gpu", FreeGPUs: []int{0, 1}, GPUs: 2, FreeSlots: 4, FreeCPUMillis: 500, CPUMillis: 8000, FreeMemoryMB: 8192, MemoryMB: 16384},
		{ID: "cpu", FreeSlots: 4, FreeCPUMillis: 1000, CPUMillis: 4000, FreeMemoryMB: 8192, MemoryMB: 16384}}}
	big, small := waiting("big", 0, 0), waiting("small", 0, 10)
	big.CPUs, big.MemoryMB, small.CPUs, small.MemoryMB = 3, 1024, 1, 1024
	q := []core.Task{big, small}
	s.ReserveBefore = t0 // nothing queued before it
	if got := Place(s, q); len(got) != 1 || got[0].Task.ID != "small" || got[0].Worker != "cpu" {
		t.Fatalf("without a reservation placed %v, want small on cpu", ids(got))
	}
	s.ReserveBefore = t0.Add(5 * time.Second)
	res := Plan(s, q)
	if len(res.Placements) != 0 {
		t.Fatalf("with big reserving placed %v, want none (cpu's free core is held)", ids(res.Placements))
	}
	want := map[string]core.QueueInfo{
		"big":   {Position: 1, Code: CodeCPU, Reason: "needs 3 cores and has waited long: the cores and memory of cpu are held for it as they free (1 core of 4 cores free)"},
		"small": {Position: 2, Code: CodePriority, Reason: "the free cores it would fit in are held for big, which has waited longer than the backfill allows"},
	}
	for id, w := range want {
		if got := res.Waiting[id]; got != w {
			t.Errorf("%s: got %+v\nwant %+v", id, got, w)
		}
	}
	// A GPU run that reserves holds the cores it asks for beside the GPUs.
	gpuRun, cpuRun := waiting("g", 2, 0), waiting("c", 0, 10)
	gpuRun.CPUs, cpuRun.CPUs = 8, 0.5
	s.Free[0].FreeGPUs, s.Free[1].FreeCPUMillis = []int{0}, 0
	if res := Plan(s, []core.Task{gpuRun, cpuRun}); len(res.Placements) != 0 || res.Waiting["g"].Code != CodeResources {
		t.Fatalf("placed %v (%+v), want c kept off gpu's held cores", ids(res.Placements), res.Waiting)
	}
}

func ids(ps []Placement) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Task.ID)
	}
	return out
}

// No starvation: on one 4-GPU worker, a 4-GPU run waits behind a bounded
// stream of 1-GPU runs (one arriving each second for a while, each running
// d seconds). With reservations after r seconds it starts within r + d + 1
// seconds, however the stream goes.
func TestReservationPreventsStarvation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := rapid.IntRange(1, 20).Draw(t, "reserve")
		d := rapid.IntRange(1, 10).Draw(t, "duration")
		arrivals := rapid.IntRange(r+d+5, 200).Draw(t, "arrivals")
		type running struct {
			gpus []int
			end  int
		}
		busy := []running{{gpus: []int{0}, end: d}} // so big cannot start at once
		queue := []core.Task{waiting("big", 4, 0)}
		for now := 0; now < arrivals+d+r+5; now++ {
			if now < arrivals && rapid.IntRange(0, 3).Draw(t, "arrive") > 0 {
				queue = append(queue, waiting(fmt.Sprint("s", now), 1, now))
			}
			busy = slices.DeleteFunc(busy, func(b running) bool { return b.end <= now })
			w := Worker{ID: "w", GPUs: 4}
			for g := range 4 {
				if !slices.ContainsFunc(busy, func(b running) bool { return slices.Contains(b.gpus, g) }) {
					w.FreeGPUs = append(w.FreeGPUs, g)
				}
			}
			s := Snapshot{Connected: 1, MaxGPUs: 4, ReserveBefore: t0.Add(time.Duration(now-r) * time.Second)}
			if len(w.FreeGPUs) > 0 {
				s.Free = []Worker{w}
			}
			for _, p := range Place(s, queue) {
				if p.Task.ID == "big" {
					if now > r+d+1 {
						t.Fatalf("big started at %d s, past the bound %d (reserve %d, runs of %d s)", now, r+d+1, r, d)
					}
					return
				}
				busy = append(busy, running{gpus: p.GPUs, end: now + d})
				id := p.Task.ID
				queue = slices.DeleteFunc(queue, func(q core.Task) bool { return q.ID == id })
			}
		}
		t.Fatalf("big never started (reserve %d, runs of %d s)", r, d)
	})
}
