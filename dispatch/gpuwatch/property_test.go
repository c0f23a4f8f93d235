package gpuwatch

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// idleModel finds, offline, the samples that must carry the idle warning:
// drop samples that do not advance time; cut the rest into stretches of
// consecutive idle samples no more than maxGap apart; in each stretch the
// first sample at least after past its start warns.
func idleModel(times []int, idle []bool, after, maxGap int) []int {
	var kept []int
	last := -1
	for k, t := range times {
		if len(kept) == 0 || t > last {
			kept = append(kept, k)
			last = t
		}
	}
	var warns []int
	for i := 0; i < len(kept); {
		if !idle[kept[i]] {
			i++
			continue
		}
		j := i
		for j+1 < len(kept) && idle[kept[j+1]] && times[kept[j+1]]-times[kept[j]] <= maxGap {
			j++
		}
		for k := i; k <= j; k++ {
			if times[kept[k]]-times[kept[i]] >= after {
				warns = append(warns, kept[k])
				break
			}
		}
		i = j + 1
	}
	return warns
}

func TestIdleProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		after := rapid.IntRange(1, 100).Draw(t, "after")
		maxGap := rapid.IntRange(1, 40).Draw(t, "maxGap")
		cancel := rapid.Bool().Draw(t, "cancel")
		nGPU := rapid.IntRange(1, 3).Draw(t, "gpus")
		n := rapid.IntRange(1, 60).Draw(t, "samples")
		w := NewWatch(Config{IdleUtilPct: 5, IdleAfter: time.Duration(after) * time.Second,
			MaxGap: time.Duration(maxGap) * time.Second, IdleCancel: cancel})
		gpus := make([]int, nGPU)
		for i := range gpus {
			gpus[i] = i
		}
		run := []Run{{ID: "r", GPUs: gpus}}
		var (
			times    []int
			idle     []bool
			got      []int
			cancels  int
			out      Result
			now      int
			utilGen  = rapid.SampledFrom([]int{0, 1, 4, 5, 6, 50, 100, Unknown})
			stepsGen = rapid.IntRange(-5, 50)
		)
		for k := range n {
			now += stepsGen.Draw(t, "dt")
			s := Sample{}
			allIdle := true
			for _, g := range gpus {
				u := utilGen.Draw(t, "util")
				if u < 0 || u >= 5 {
					allIdle = false
				}
				s.GPUs = append(s.GPUs, GPU{Index: g, UtilPct: u, MemoryUsedMB: 0})
			}
			times, idle = append(times, now), append(idle, allIdle)
			w.Observe(at(now), s, run, &out)
			if len(out.Warnings) > 1 {
				t.Fatalf("sample %d: %d warnings", k, len(out.Warnings))
			}
			if len(out.Warnings) == 1 {
				got = append(got, k)
			}
			if len(out.Cancels) > 0 {
				if !cancel || len(out.Warnings) != 1 {
					t.Fatalf("sample %d: a cancel without the action or the warning: %+v", k, out)
				}
				cancels++
			}
		}
		want := idleModel(times, idle, after, maxGap)
		if !slices.Equal(got, want) {
			t.Fatalf("warnings at samples %v, want %v (times %v, idle %v)", got, want, times, idle)
		}
		if wantCancels := min(len(want), 1); cancel && cancels != wantCancels {
			t.Fatalf("%d cancels, want %d", cancels, wantCancels)
		}
	})
}

// TestForeignProperty: over any sequence of samples, every foreign pid that
// shows on a run's GPU is warned of exactly once to that run, and never to a
// run whose GPUs it was not on.
func TestForeignProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		runs := []Run{{ID: "a", GPUs: []int{0, 1}}, {ID: "b", GPUs: []int{2}}}
		w := NewWatch(DefaultConfig())
		seen := map[string]map[int]bool{"a": {}, "b": {}}
		warned := map[string]map[int]int{"a": {}, "b": {}}
		var out Result
		n := rapid.IntRange(1, 30).Draw(t, "samples")
		for k := range n {
			s := utils(50, 50, 50, 50)
			for g := range s.GPUs {
				for _, pid := range rapid.SliceOfNDistinct(rapid.IntRange(1, 12), 0, 3, rapid.ID[int]).Draw(t, "pids") {
					s.GPUs[g].Foreign = append(s.GPUs[g].Foreign, Proc{PID: pid, User: "u", MemoryMB: 1})
					for _, r := range runs {
						if slices.Contains(r.GPUs, g) {
							seen[r.ID][pid] = true
						}
					}
				}
			}
			w.Observe(at(k*10), s, runs, &out)
			for _, wn := range out.Warnings {
				var pid int
				for _, g := range s.GPUs {
					for _, p := range g.Foreign {
						if foreignMessage(g.Index, p) == wn.Message {
							pid = p.PID
						}
					}
				}
				if wn.Code != CodeForeign || pid == 0 || !seen[wn.Run][pid] {
					t.Fatalf("sample %d: unexpected warning %+v", k, wn)
				}
				warned[wn.Run][pid]++
			}
		}
		for run, pids := range seen {
			for pid := range pids {
				if warned[run][pid] != 1 {
					t.Fatalf("run %s was warned %d times of pid %d", run, warned[run][pid], pid)
				}
			}
		}
	})
}
