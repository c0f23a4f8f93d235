package earlystop

import (
	"math/rand/v2"
	"testing"

	"github.com/rlsched/rlsched/sweep/goal"
	"github.com/rlsched/rlsched/sweep/reference"
)

// TestReferenceSavesSteps is the reference: on every seeded random
// sweep of the reference problem, ASHA runs at most half the steps of the
// same sweep run to the end, and its best member ends within 5% of the full
// sweep's. The median rule, gentler, must save a quarter with the same 5%.
func TestReferenceSavesSteps(t *testing.T) {
	methods := []struct {
		cfg      Config
		minSaved float64
	}{
		{Config{Method: ASHA, Goal: goal.Maximize, MinSteps: reference.Steps / 27}, 0.5},
		{Config{Method: Median, Goal: goal.Maximize, MinSteps: reference.Steps / 10}, 0.25},
	}
	for seed := range uint64(10) {
		// A random sweep: TPE before its first estimate draws at random.
		xs, err := reference.RandomSweep(rand.New(rand.NewPCG(seed, 3)), reference.Members)
		if err != nil {
			t.Fatal(err)
		}
		fullSteps, fullBest := reference.Simulate(rand.New(rand.NewPCG(seed, 4)), xs,
			func(string, int64, float64) bool { return false })
		for _, m := range methods {
			s, err := New(m.cfg)
			if err != nil {
				t.Fatal(err)
			}
			steps, best := reference.Simulate(rand.New(rand.NewPCG(seed, 4)), xs,
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
