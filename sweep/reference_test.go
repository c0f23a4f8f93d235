package sweep

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/sweep/earlystop"
	"github.com/rlsched/rlsched/sweep/reference"
	"github.com/rlsched/rlsched/sweep/tpe"
)

// TestReferenceTPEWithASHA drives the pure parts as the sweep controller
// will: a tpe spec with asha on the reference problem, members proposed
// as slots free (running ones told to TPE), their curves reported to the
// stopper, stopped members fed back as stopped trials. On every one of 10
// seeds it stops members with recorded reasons and ends within 10% of the
// optimum; on their median it runs under half the steps of its budget run
// to the end (TPE's proposals are good, so fewer are stopped than in a
// random sweep, sweep/earlystop's reference).
func TestReferenceTPEWithASHA(t *testing.T) {
	const (
		budget, parallel = 100, 6
		steps, every     = 1000, 10
	)
	spec := mustParse(t, `{"method":"tpe","budget":100,"maxParallel":6,"random":`+reference.Random+`,
		"earlyStop":{"method":"asha","minSteps":37}}`)
	if !slices.Equal(spec.Space(), reference.Space) {
		t.Fatalf("Space = %+v; want the reference's %+v", spec.Space(), reference.Space)
	}
	var savings []float64
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 5))
		stopper, err := earlystop.New(spec.EarlyStop.Config)
		if err != nil {
			t.Fatal(err)
		}
		type running struct {
			m    Member
			x    []float64
			step int64
			last float64
		}
		var active []*running
		var done []tpe.Trial // finished and stopped, in the order they ended
		var ran int64
		best, proposed := 0.0, 0
		for proposed < budget || len(active) > 0 {
			for len(active) < parallel && proposed < budget {
				trials := slices.Clone(done)
				for _, r := range active {
					trials = append(trials, tpe.Trial{Params: r.x, State: tpe.Running})
				}
				x, err := tpe.Suggest(spec.Space(), trials, rng, tpe.Options{Goal: spec.Goal})
				if err != nil {
					t.Fatal(err)
				}
				ms, err := spec.Proposal(x, proposed)
				if err != nil {
					t.Fatal(err)
				}
				proposed += len(ms)
				back, err := spec.Point(ms[0].Cell) // what a controller rebuilds from the store
				if err != nil {
					t.Fatal(err)
				}
				active = append(active, &running{m: ms[0], x: back})
			}
			kept := active[:0]
			for _, r := range active {
				r.step += every
				ran += every
				r.last = reference.Curve(r.x, float64(r.step)) + 0.01*rng.NormFloat64()
				d, _ := stopper.Report(r.m.Label, r.step, r.last)
				switch {
				case d.Stop:
					done = append(done, tpe.Trial{Params: r.x, Value: r.last, State: tpe.Stopped, Step: r.step})
				case r.step >= steps:
					done = append(done, tpe.Trial{Params: r.x, Value: r.last})
					best = max(best, reference.Final(r.x))
				default:
					kept = append(kept, r)
				}
			}
			active = kept
		}
		var stops []earlystop.Decision
		for _, d := range stopper.Decisions() {
			if d.Stop {
				stops = append(stops, d)
			}
		}
		saved := 1 - float64(ran)/float64(budget*steps)
		t.Logf("seed %d: %d of %d members stopped early, %.0f%% of the steps saved, best final %.3f", seed, len(stops), budget, 100*saved, best)
		if len(stops) == 0 || !strings.Contains(stops[0].Reason(), "stopped at rung") {
			t.Errorf("seed %d: stops %v; want some, each with its rung", seed, stops)
		}
		savings = append(savings, saved)
		if best < 0.9*reference.Optimum {
			t.Errorf("seed %d: the best member ends at %.3f; want within 10%% of the optimum %v", seed, best, reference.Optimum)
		}
	}
	slices.Sort(savings)
	if m := (savings[4] + savings[5]) / 2; m < 0.5 {
		t.Errorf("median of the steps saved %.0f%%; want ≥ 50%%", 100*m)
	}
}
