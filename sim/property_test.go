package sim

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestRunInvariants: on random clusters, traces, faults and policies,
// every job either finishes or is reported, none finishes before its work
// is done, none is placed twice or on a GPU in use (the engine panics with
// BUG if so), and the allocation never exceeds the cluster.
func TestRunInvariants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := &Cluster{}
		nw := rapid.IntRange(0, 4).Draw(rt, "workers")
		for i := range nw {
			c.Workers = append(c.Workers, WorkerSpec{ID: fmt.Sprintf("w%d", i), GPUs: rapid.IntRange(0, 4).Draw(rt, "gpus"),
				Slots: rapid.IntRange(0, 2).Draw(rt, "slots")})
		}
		for i := range rapid.IntRange(0, 3).Draw(rt, "faults") {
			if nw == 0 {
				break
			}
			c.Faults = append(c.Faults, Fault{Worker: fmt.Sprintf("w%d", rapid.IntRange(0, nw-1).Draw(rt, fmt.Sprint("fw", i))),
				At:  Duration(time.Duration(rapid.IntRange(0, 600).Draw(rt, "at")) * time.Minute),
				For: Duration(time.Duration(rapid.IntRange(0, 120).Draw(rt, "for")) * time.Minute)})
		}
		tr := &Trace{}
		for i := range rapid.IntRange(0, 40).Draw(rt, "jobs") {
			j := job(fmt.Sprintf("j%02d", i), fmt.Sprintf("u%d", rapid.IntRange(0, 3).Draw(rt, "user")),
				time.Duration(rapid.IntRange(0, 600).Draw(rt, "submit"))*time.Minute,
				time.Duration(rapid.IntRange(-1, 240).Draw(rt, "dur"))*time.Minute, rapid.IntRange(0, 5).Draw(rt, "g"))
			j.Priority = rapid.IntRange(0, 2).Draw(rt, "prio")
			j.Preemptible = rapid.Bool().Draw(rt, "preemptible")
			tr.add(j)
		}
		pol := rapid.SampledFrom([]string{"rlsched", "fifo", "sjf", "tiresias", "x:reserve=10m,preempt=1m", "q:quota=2"}).Draw(rt, "policy")
		p, err := ParsePolicy(pol)
		if err != nil {
			rt.Fatal(err)
		}
		cfg := Config{Policy: p, CheckpointEvery: time.Duration(rapid.IntRange(0, 60).Draw(rt, "ck")) * time.Minute}
		r, err := Run(c, tr, cfg)
		if err != nil {
			rt.Fatal(err)
		}
		seen := map[string]bool{}
		for _, j := range r.Jobs {
			if seen[j.ID] {
				rt.Fatalf("%s finished twice", j.ID)
			}
			seen[j.ID] = true
			if j.Start.Before(j.Submit) || j.End.Sub(j.Start) < j.Duration || j.Lost < 0 {
				rt.Fatalf("%s: %+v", j.ID, j)
			}
			if cfg.CheckpointEvery == 0 && j.Lost > 0 && j.Preemptions+j.Faults == 0 {
				rt.Fatalf("%s lost work without a stop", j.ID)
			}
		}
		for _, s := range r.Skipped {
			if seen[s.ID] {
				rt.Fatalf("%s finished and skipped", s.ID)
			}
			seen[s.ID] = true
		}
		if len(seen) != len(tr.Jobs)+len(tr.Skipped) {
			rt.Fatalf("%d jobs accounted for, the trace has %d", len(seen), len(tr.Jobs)+len(tr.Skipped))
		}
		if s := r.Summarize(); s.Allocation > 1+1e-9 || s.Utilisation > s.Allocation+1e-9 {
			rt.Fatalf("allocation %v, utilisation %v", s.Allocation, s.Utilisation)
		}
	})
}
