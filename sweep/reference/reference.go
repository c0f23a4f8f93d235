// Package reference is issue 35's reference problem, shared by the tests of
// sweep's search and early stopping: four params with a known optimum (the
// learning rate on a log scale, a discount, a width and a categorical
// optimiser) and a learning curve per configuration, so a simulated member
// runs in microseconds.
//
// It is test support: no production code imports it. It never does I/O and
// holds no randomness; noise is the caller's.
package reference

import (
	"math"

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
