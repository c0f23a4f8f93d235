package earlystop

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rlsched/rlsched/sweep/goal"
	"github.com/rlsched/rlsched/sweep/reference"
	"github.com/rlsched/rlsched/sweep/tpe"
)

const (
	refMembers  = 100
	refSteps    = 1000 // each member's full length
	refEvery    = 10   // a report every refEvery steps
	refParallel = 10
)

// simulate runs a sweep of the reference problem's configurations xs,
// refParallel members at a time, each to refSteps unless stop says so, and
// returns the steps run and the true final value of the best member that
// ran to the end (by its last noisy report, as a sweep would pick it).
func simulate(rng *rand.Rand, xs [][]float64, stop func(member string, step int64, value float64) bool) (steps int64, best float64) {
	type slot struct {
		member int
		step   int64
	}
	var active []slot
	next := 0
	bestReport := math.Inf(-1)
	for next < len(xs) || len(active) > 0 {
		for len(active) < refParallel && next < len(xs) {
			active = append(active, slot{member: next})
			next++
		}
		kept := active[:0]
		for _, s := range active {
			s.step += refEvery
			steps += refEvery
			x := xs[s.member]
			v := reference.Curve(x, float64(s.step)) + 0.01*rng.NormFloat64()
			switch {
			case stop(fmt.Sprint(s.member), s.step, v):
			case s.step >= refSteps:
				if v > bestReport {
					bestReport, best = v, reference.Curve(x, refSteps)
				}
			default:
				kept = append(kept, s)
			}
		}
		active = kept
	}
	return steps, best
}

// TestReferenceSavesSteps is the reference: on every seeded random
// sweep of the reference problem, ASHA runs at most half the steps of the
// same sweep run to the end, and its best member ends within 5% of the full
// sweep's. The median rule, gentler, must save a quarter with the same 5%.
func TestReferenceSavesSteps(t *testing.T) {
	methods := []struct {
		cfg      Config
		minSaved float64
	}{
		{Config{Method: ASHA, Goal: goal.Maximize, MinSteps: refSteps / 27}, 0.5},
		{Config{Method: Median, Goal: goal.Maximize, MinSteps: refSteps / 10}, 0.25},
	}
	for seed := range uint64(10) {
		// A random sweep: TPE before its first estimate draws at random.
		rng := rand.New(rand.NewPCG(seed, 3))
		xs := make([][]float64, refMembers)
		for i := range xs {
			var err error
			if xs[i], err = tpe.Suggest(reference.Space, nil, rng, tpe.Options{}); err != nil {
				t.Fatal(err)
			}
		}
		fullSteps, fullBest := simulate(rand.New(rand.NewPCG(seed, 4)), xs,
			func(string, int64, float64) bool { return false })
		for _, m := range methods {
			s, err := New(m.cfg)
			if err != nil {
				t.Fatal(err)
			}
			steps, best := simulate(rand.New(rand.NewPCG(seed, 4)), xs,
				func(member string, step int64, v float64) bool { d, _ := s.Report(member, step, v); return d.Stop })
			saved := 1 - float64(steps)/float64(fullSteps)
			t.Logf("seed %d, %s: saves %.0f%% of the steps; best %.3f, the full sweep's %.3f", seed, m.cfg.Method, 100*saved, best, fullBest)
			if saved < m.minSaved {
				t.Errorf("seed %d: %s saves %.0f%% of the steps; want ≥ %.0f%%", seed, m.cfg.Method, 100*saved, 100*m.minSaved)
			}
			if best < 0.95*fullBest {
				t.Errorf("seed %d: %s's best ends at %.3f, more than 5%% below the full sweep's %.3f", seed, m.cfg.Method, best, fullBest)
			}
		}
	}
}
