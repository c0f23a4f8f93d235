package tpe

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The reference problem of issue 35: four params, the learning rate on a
// log scale and one categorical, a known optimum of 1 at lr=3e-3,
// gamma=0.97, width=128, optimizer=adam.
var referenceSpace = Space{
	{Name: "lr", Kind: LogUniform, Min: 1e-5, Max: 1e-1},
	{Name: "gamma", Kind: Uniform, Min: 0.8, Max: 0.999},
	{Name: "width", Kind: Int, Min: 16, Max: 512},
	{Name: "optimizer", Kind: Categorical, N: 3},
}

func referenceObjective(x []float64) float64 {
	dl := (math.Log10(x[0]) - math.Log10(3e-3)) / 0.8
	dg := (x[1] - 0.97) / 0.08
	dw := (x[2] - 128) / 256
	return math.Exp(-dl*dl/2) * math.Exp(-dg*dg/2) * (1 - 0.5*dw*dw) * [3]float64{1, 0.85, 0.6}[int(x[3])]
}

// trialsToReach is how many trials a search needs before one is within 5%
// of the optimum, or limit+1 when none of limit is.
func trialsToReach(next func(trials []Trial) []float64, limit int) int {
	var trials []Trial
	for n := 1; n <= limit; n++ {
		x := next(trials)
		v := referenceObjective(x)
		if v >= 0.95 {
			return n
		}
		trials = append(trials, Trial{Params: x, Value: v})
	}
	return limit + 1
}

// TestReferenceTPEBeatsRandom is the reference: on the median of 10
// seeded searches TPE gets within 5% of the optimum in fewer trials than
// random search.
func TestReferenceTPEBeatsRandom(t *testing.T) {
	const seeds, limit = 10, 1000
	var tpeN, randomN []int
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 1))
		tpeN = append(tpeN, trialsToReach(func(trials []Trial) []float64 {
			x, err := Suggest(referenceSpace, trials, rng, Options{})
			if err != nil {
				t.Fatal(err)
			}
			return x
		}, limit))
		rng = rand.New(rand.NewPCG(seed, 2))
		randomN = append(randomN, trialsToReach(func([]Trial) []float64 {
			x := make([]float64, len(referenceSpace))
			for i, p := range referenceSpace {
				x[i] = p.sampleUniform(rng)
			}
			return x
		}, limit))
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
