// Package reference is issue 35's reference problem, shared by the tests of
// sweep's search and early stopping: four params with a known optimum (the
// learning rate on a log scale, a discount, a width and a categorical
// optimiser) and a learning curve per configuration, so a simulated member
// runs in microseconds.
//
// It is test and bench support (the sweep-search scenario): no production
// code imports it. It never does I/O and holds no randomness; noise and
// draws come from the caller's generator.
package reference

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/rlsched/rlsched/sweep/tpe"
)

// Random is the space as a sweep spec's random field.
const Random = `{
	"lr":{"dist":"loguniform","min":1e-5,"max":1e-1},
	"gamma":{"dist":"uniform","min":0.8,"max":0.999},
	"width":{"dist":"int","min":16,"max":512},
	"optimizer":{"dist":"choice","values":["adam","rmsprop","sgd"]}}`

// Space is Random as a search space, in name order as sweep.Spec.Space
// gives it.
var Space = tpe.Space{
	{Name: "gamma", Kind: tpe.Uniform, Min: 0.8, Max: 0.999},
	{Name: "lr", Kind: tpe.LogUniform, Min: 1e-5, Max: 1e-1},
	{Name: "optimizer", Kind: tpe.Categorical, N: 3},
	{Name: "width", Kind: tpe.Int, Min: 16, Max: 512},
}

// Optimum is Final's largest value, at gamma 0.97, lr 3e-3, adam, width 128.
const Optimum = 1.0

// Final is the objective of point x of Space: the reward a member ends at.
func Final(x []float64) float64 {
	dg := (x[0] - 0.97) / 0.08
	dl := (math.Log10(x[1]) - math.Log10(3e-3)) / 0.8
	dw := (x[3] - 128) / 256
	return math.Exp(-dg*dg/2) * math.Exp(-dl*dl/2) * [3]float64{1, 0.85, 0.6}[int(x[2])] * (1 - 0.5*dw*dw)
}

// Curve is the member's reward at step: it rises towards Final with a time
// constant that grows as the learning rate falls, so a fast learner with a
// high rate can lead early and end below a slower, better one — what makes
// stopping early a gamble.
func Curve(x []float64, step float64) float64 {
	tau := min(max(100*math.Pow(1e-2/x[1], 0.3), 30), 400)
	return Final(x) * (1 - math.Exp(-step/tau))
}

// TrialsToReach is how many trials a search with opt needs before one is
// within 5% of Optimum, or limit+1 when none of limit is. Random search is
// tpe.Options{StartupTrials: limit + 1}: never past the startup draws.
func TrialsToReach(rng *rand.Rand, opt tpe.Options, limit int) (int, error) {
	var trials []tpe.Trial
	for n := 1; n <= limit; n++ {
		x, err := tpe.Suggest(Space, trials, rng, opt)
		if err != nil {
			return 0, err
		}
		v := Final(x)
		if v >= 0.95*Optimum {
			return n, nil
		}
		trials = append(trials, tpe.Trial{Params: x, Value: v})
	}
	return limit + 1, nil
}

// The simulated sweep of Simulate: members of Steps steps each, reporting
// every Every steps, Parallel at a time.
const (
	Members  = 100
	Steps    = 1000
	Every    = 10
	Parallel = 10
)

// Simulate runs a sweep of the configurations xs, Parallel members at a
// time, each to Steps unless stop says so, and returns the steps run and
// the true final value of the best member that ran to the end (by its last
// noisy report, as a sweep would pick it).
func Simulate(rng *rand.Rand, xs [][]float64, stop func(member string, step int64, value float64) bool) (steps int64, best float64) {
	type slot struct {
		member int
		step   int64
	}
	var active []slot
	next := 0
	bestReport := math.Inf(-1)
	for next < len(xs) || len(active) > 0 {
		for len(active) < Parallel && next < len(xs) {
			active = append(active, slot{member: next})
			next++
		}
		kept := active[:0]
		for _, s := range active {
			s.step += Every
			steps += Every
			x := xs[s.member]
			v := Curve(x, float64(s.step)) + 0.01*rng.NormFloat64()
			switch {
			case stop(fmt.Sprint(s.member), s.step, v):
			case s.step >= Steps:
				if v > bestReport {
					bestReport, best = v, Curve(x, Steps)
				}
			default:
				kept = append(kept, s)
			}
		}
		active = kept
	}
	return steps, best
}

// RandomSweep draws n configurations at random (TPE before its first
// estimate draws at random).
func RandomSweep(rng *rand.Rand, n int) ([][]float64, error) {
	xs := make([][]float64, n)
	for i := range xs {
		var err error
		if xs[i], err = tpe.Suggest(Space, nil, rng, tpe.Options{}); err != nil {
			return nil, err
		}
	}
	return xs, nil
}
