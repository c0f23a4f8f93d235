package tpe_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rlsched/rlsched/sweep/reference"
	"github.com/rlsched/rlsched/sweep/tpe"
)

// trialsToReach is reference.TrialsToReach, failing t on an error.
func trialsToReach(t *testing.T, rng *rand.Rand, opt tpe.Options, limit int) int {
	n, err := reference.TrialsToReach(rng, opt, limit)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReferenceTPEBeatsRandom is the reference: on the median of 10
// seeded searches TPE gets within 5% of the optimum in fewer trials than
// random search.
func TestReferenceTPEBeatsRandom(t *testing.T) {
	const seeds, limit = 10, 1000
	random := tpe.Options{StartupTrials: limit + 1} // never past the startup draws
	var tpeN, randomN []int
	for seed := range uint64(seeds) {
		tpeN = append(tpeN, trialsToReach(t, rand.New(rand.NewPCG(seed, 1)), tpe.Options{}, limit))
		randomN = append(randomN, trialsToReach(t, rand.New(rand.NewPCG(seed, 2)), random, limit))
	}
	tm, rm := median(tpeN), median(randomN)
	t.Logf("trials to within 5%% of the optimum: TPE %v (median %v), random %v (median %v)", tpeN, tm, randomN, rm)
	if tm >= rm {
		t.Errorf("TPE's median %v trials is not fewer than random search's %v", tm, rm)
	}
}

func median(xs []int) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	return float64(s[(n-1)/2]+s[n/2]) / 2
}

// BenchmarkSuggest times one proposal after n trials of the reference space.
func BenchmarkSuggest(b *testing.B) {
	for _, n := range []int{50, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 0))
			trials := make([]tpe.Trial, n)
			for i := range trials {
				x, err := tpe.Suggest(reference.Space, nil, rng, tpe.Options{})
				if err != nil {
					b.Fatal(err)
				}
				trials[i] = tpe.Trial{Params: x, Value: reference.Final(x)}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tpe.Suggest(reference.Space, trials, rng, tpe.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
