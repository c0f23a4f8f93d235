package main

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"time"

	"github.com/rlsched/rlsched/sim"
)

// runSim times rlsched sim (package sim, issue 31) in this process: a
// synthetic year of a million jobs of 200 users (Helios Venus' shape of
// 1–8 GPUs, log-normal durations) on 125 workers × 8 GPUs, under the
// rlsched policy with checkpoints every 30 minutes; the peak of the
// process's memory from the runtime's own count.
func runSim(e *env) (*report, error) {
	jobs := pick(e, 100_000, 1_000_000)
	spec := sim.Synthetic{Jobs: jobs, Users: 200, Span: 365 * 24 * time.Hour, Median: 30 * time.Minute,
		High: 0.05, Preemptible: 0.5, Seed: 1}
	c := &sim.Cluster{Workers: []sim.WorkerSpec{{ID: "node", Count: 125, GPUs: 8, Slots: 8}}}
	rep := &report{size: fmt.Sprintf("%s synthetic jobs over a year on 125 workers × 8 GPUs", human(float64(jobs)))}

	runtime.GC()
	stop := make(chan struct{})
	peak := make(chan uint64)
	go func() { // the runtime's mapped memory, sampled: what RSS follows
		s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
		var top uint64
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			top = max(top, s[0].Value.Uint64())
			select {
			case <-stop:
				peak <- top
				return
			case <-t.C:
			}
		}
	}()
	t0 := time.Now()
	tr := spec.Trace()
	gen := time.Since(t0)
	t1 := time.Now()
	r, err := sim.Run(c, tr, sim.Config{Policy: sim.Policy{Name: "rlsched"}, CheckpointEvery: 30 * time.Minute})
	took := time.Since(t1)
	close(stop)
	mem := <-peak
	if err != nil {
		return nil, err
	}
	s := r.Summarize()
	e.logf("sim: %v for %d jobs (%d events, %d passes), trace made in %v, peak memory %d MiB", took, jobs, r.Events, r.Passes, gen, mem>>20)

	t := rep.newTable("One simulated year", "jobs", "wall", "events/s", "planner passes/s", "per pass", "peak memory", "JCT mean", "GPU allocation")
	t.add(human(float64(jobs)), fmt.Sprintf("%.1f s", took.Seconds()), human(float64(r.Events)/took.Seconds()),
		human(float64(r.Passes)/took.Seconds()), fmt.Sprintf("%.1f µs", float64(took.Microseconds())/float64(max(r.Passes, 1))),
		fmt.Sprintf("%d MiB", mem>>20), fmt.Sprintf("%.0f s", s.JCT.Mean), fmt.Sprintf("%.1f%%", 100*s.Allocation))
	// The goal is for a million jobs; -quick's tenth has a tenth of the time.
	budget := time.Duration(float64(10*time.Minute) * float64(jobs) / 1e6)
	rep.goal(took <= budget && mem <= 2<<30, "%s jobs in ≤ %v and ≤ 2 GiB (a million in ≤ 10 minutes): %.1f s, %d MiB",
		human(float64(jobs)), budget, took.Seconds(), mem>>20)
	rep.note("Per pass is the wall time over the planner passes, the simulation's own work included; the plan scenario's figure is one pass over a 100,000-run queue, where a simulated pass plans a page of at most 256 runs on the workers with something free.")
	rep.result = result{metric: "sim_jobs_per_s", value: float64(jobs) / took.Seconds(), unit: "jobs/s"}
	return rep, nil
}
