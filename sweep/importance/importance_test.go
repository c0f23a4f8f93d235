package importance

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/rlsched/rlsched/sweep/tpe"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0)) }

// sample draws n trials of three params: x a float in [0, 1], lr on a log
// scale, opt one of three choices; y is f of them.
func sample(n int, rng *rand.Rand, f func(x, lr, opt float64) float64) ([][]float64, []float64) {
	xs, ys := make([][]float64, n), make([]float64, n)
	for i := range xs {
		x, lr, opt := rng.Float64(), math.Pow(10, -5+4*rng.Float64()), float64(rng.IntN(3))
		xs[i], ys[i] = []float64{x, lr, opt}, f(x, lr, opt)
	}
	return xs, ys
}

var space3 = tpe.Space{
	{Name: "x", Kind: tpe.Uniform, Min: 0, Max: 1},
	{Name: "lr", Kind: tpe.LogUniform, Min: 1e-5, Max: 0.1},
	{Name: "opt", Kind: tpe.Categorical, N: 3},
}

func ranking(imps []Importance) string {
	var names []string
	for _, imp := range imps {
		names = append(names, imp.Param)
	}
	return strings.Join(names, " ")
}

func TestPermutationRanks(t *testing.T) {
	f := func(name string, fn func(x, lr, opt float64) float64, wantFirst string, wantShare float64) {
		t.Helper()
		rng := newRand(1)
		xs, ys := sample(120, rng, fn)
		imps, err := Permutation(space3, xs, ys, rng, Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: %+v", name, imps)
		if imps[0].Param != wantFirst || imps[0].Value < wantShare {
			t.Errorf("%s: importances %+v; want %s first with ≥ %v", name, imps, wantFirst, wantShare)
		}
		var sum float64
		for _, imp := range imps {
			sum += imp.Value
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("%s: importances sum to %v", name, sum)
		}
	}
	noise := newRand(99)
	f("only x matters", func(x, _, _ float64) float64 { return math.Sin(3*x) + 0.01*noise.NormFloat64() }, "x", 0.8)
	f("only lr matters, on a log scale", func(_, lr, _ float64) float64 {
		d := math.Log10(lr) + 3
		return -d*d + 0.01*noise.NormFloat64()
	}, "lr", 0.8)
	f("only the choice matters", func(_, _, opt float64) float64 { return []float64{0, 1, 3}[int(opt)] }, "opt", 0.8)
	f("x much more than the choice", func(x, _, opt float64) float64 { return 4*x + 0.3*opt }, "x", 0.8)
}

func TestPermutationNothingMatters(t *testing.T) {
	rng := newRand(2)
	xs, ys := sample(40, rng, func(_, _, _ float64) float64 { return 7 })
	imps, err := Permutation(space3, xs, ys, rng, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Equal values sort by name.
	if got := ranking(imps); got != "lr opt x" {
		t.Errorf("ranking %q; want names in order", got)
	}
	for _, imp := range imps {
		if imp.Value != 0 {
			t.Errorf("a constant objective gives %+v", imps)
		}
	}
}

func TestPermutationInput(t *testing.T) {
	f := func(xs [][]float64, ys []float64, wantErr string) {
		t.Helper()
		_, err := Permutation(space3, xs, ys, newRand(3), Options{})
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("Permutation = %v; want an error with %q", err, wantErr)
		}
	}
	xs, ys := sample(10, newRand(4), func(x, _, _ float64) float64 { return x })
	f(xs, ys[:9], "10 trials of params for 9 values")
	f(append(xs[:9:9], []float64{1, 2}), ys, "trial 9 has 2 params; want 3")
	f(append(xs[:9:9], []float64{math.NaN(), 1, 0}), ys, `trial 9: param "x" is NaN`)
	nan := append(ys[:2:2], math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN())
	f(xs, nan, "2 trials have a value; importance needs at least 8")
}

func TestPermutationProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(MinTrials, 40).Draw(t, "trials")
		var xs [][]float64
		var ys []float64
		for range n {
			xs = append(xs, []float64{
				rapid.Float64Range(-1, 1).Draw(t, "x"),
				float64(rapid.IntRange(0, 3).Draw(t, "lr")),
				float64(rapid.IntRange(0, 2).Draw(t, "opt")),
			})
			ys = append(ys, rapid.SampledFrom([]float64{0, 1, -2, 5, math.NaN()}).Draw(t, "y"))
		}
		seed := rapid.Uint64().Draw(t, "seed")
		a, err := Permutation(space3, xs, ys, newRand(seed), Options{Trees: 10})
		if err != nil {
			if strings.Contains(err.Error(), "needs at least") {
				return // too many NaNs
			}
			t.Fatal(err)
		}
		b, _ := Permutation(space3, xs, ys, newRand(seed), Options{Trees: 10})
		var sum float64
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("the same seed gave %+v, then %+v", a, b)
			}
			if a[i].Value < 0 || a[i].Value > 1 {
				t.Fatalf("importance %+v outside [0, 1]", a[i])
			}
			sum += a[i].Value
		}
		if sum != 0 && math.Abs(sum-1) > 1e-9 {
			t.Fatalf("importances %+v sum to %v", a, sum)
		}
	})
}
