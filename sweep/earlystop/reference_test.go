package earlystop

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rlsched/rlsched/sweep/goal"
)

// learningCurve is one configuration of the reference family: its
// reward rises towards final with time constant tau; a slow learner may end
// high, which is what makes stopping early a gamble.
type learningCurve struct{ final, tau float64 }

func (c learningCurve) at(step float64) float64 { return c.final * (1 - math.Exp(-step/c.tau)) }

const (
	refMembers  = 100
	refSteps    = 1000 // each member's full length
	refEvery    = 10   // a report every refEvery steps
	refParallel = 10
)

// simulate runs a random sweep of the reference family refParallel members
// at a time, each to refSteps unless stop says so, and returns the steps run
// and the true final value of the best member that ran to the end (by its
// last noisy report, as a sweep would pick it).
func simulate(rng *rand.Rand, curves []learningCurve, stop func(member string, step int64, value float64) bool) (steps int64, best float64) {
	type slot struct {
		member int
		step   int64
	}
	var active []slot
	next := 0
	bestReport := math.Inf(-1)
	for next < len(curves) || len(active) > 0 {
		for len(active) < refParallel && next < len(curves) {
			active = append(active, slot{member: next})
			next++
		}
		kept := active[:0]
		for _, s := range active {
			s.step += refEvery
			steps += refEvery
			c := curves[s.member]
			v := c.at(float64(s.step)) + 0.01*rng.NormFloat64()
			switch {
			case stop(fmt.Sprint(s.member), s.step, v):
			case s.step >= refSteps:
				if v > bestReport {
					bestReport, best = v, c.at(refSteps)
				}
			default:
				kept = append(kept, s)
			}
		}
		active = kept
	}
	return steps, best
}

// TestReferenceSavesSteps is the reference: on every seeded sweep
// of the family, ASHA runs at most half the steps of the same sweep run to
// the end, and its best member ends within 5% of the full sweep's. The
// median rule, gentler, must save a quarter with the same 5%.
func TestReferenceSavesSteps(t *testing.T) {
	methods := []struct {
		cfg      Config
		minSaved float64
	}{
		{Config{Method: ASHA, Goal: goal.Maximize, MinSteps: refSteps / 27}, 0.5},
		{Config{Method: Median, Goal: goal.Maximize, MinSteps: refSteps / 10}, 0.25},
	}
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 3))
		curves := make([]learningCurve, refMembers)
		for i := range curves {
			curves[i] = learningCurve{final: 0.2 + 0.8*rng.Float64(), tau: 30 + 270*rng.Float64()}
		}
		fullSteps, fullBest := simulate(rand.New(rand.NewPCG(seed, 4)), curves,
			func(string, int64, float64) bool { return false })
		for _, m := range methods {
			s, err := New(m.cfg)
			if err != nil {
				t.Fatal(err)
			}
			steps, best := simulate(rand.New(rand.NewPCG(seed, 4)), curves,
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
