package tpe

import (
	"math"
	"math/rand/v2"
	"slices"
)

// parzen is a mixture of normals truncated to [lo, hi], one kernel per
// observation and one for the prior, as Optuna's _ParzenEstimator builds it.
type parzen struct {
	lo, hi  float64
	weights []float64 // sum to 1
	mus     []float64
	sigmas  []float64
	logZ    []float64 // log of each kernel's mass inside [lo, hi]
}

// newParzen builds the estimator of observations xs (in p's domain) with
// their weights. Each kernel's bandwidth is the larger distance to its
// neighbours (the domain's ends count as neighbours except for the outer
// kernels), clipped to [(hi-lo)/min(100, 1+kernels), hi-lo]; the prior is
// centred with bandwidth hi-lo.
func newParzen(lo, hi float64, xs, weights []float64, priorWeight float64) *parzen {
	n := len(xs) + 1
	z := &parzen{
		lo: lo, hi: hi,
		weights: append(slices.Clone(weights), priorWeight),
		mus:     append(slices.Clone(xs), (lo+hi)/2),
		sigmas:  make([]float64, n),
		logZ:    make([]float64, n),
	}
	normalize(z.weights)

	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case z.mus[a] < z.mus[b]:
			return -1
		case z.mus[a] > z.mus[b]:
			return 1
		}
		return 0
	})
	// sorted[i+1] is the i-th smallest mu; sorted[0] and sorted[n+1] the ends.
	sorted := make([]float64, n+2)
	sorted[0], sorted[n+1] = lo, hi
	for i, k := range order {
		sorted[i+1] = z.mus[k]
	}
	width := hi - lo
	minSigma := width / min(100, 1+float64(n))
	for i, k := range order {
		left, right := sorted[i+1]-sorted[i], sorted[i+2]-sorted[i+1]
		switch {
		case n == 1: // the prior alone: both ends count
		case i == 0:
			left = 0
		case i == n-1:
			right = 0
		}
		z.sigmas[k] = min(max(left, right, minSigma), width)
	}
	z.sigmas[n-1] = width
	for k := range z.mus {
		a, b := (lo-z.mus[k])/z.sigmas[k], (hi-z.mus[k])/z.sigmas[k]
		z.logZ[k] = math.Log(normalMass(a, b))
	}
	return z
}

// sample draws a point of [lo, hi]: a kernel by weight, then a point of its
// truncated normal by inverting the CDF.
func (z *parzen) sample(rng *rand.Rand) float64 {
	k := pick(z.weights, rng.Float64())
	mu, sigma := z.mus[k], z.sigmas[k]
	a, b := normalCDF((z.lo-mu)/sigma), normalCDF((z.hi-mu)/sigma)
	u := a + rng.Float64()*(b-a)
	x := mu + sigma*normalQuantile(u)
	return min(max(x, z.lo), z.hi)
}

// logPDF is the log density at x.
func (z *parzen) logPDF(x float64) float64 {
	terms := make([]float64, len(z.mus))
	for k, mu := range z.mus {
		d := (x - mu) / z.sigmas[k]
		terms[k] = math.Log(z.weights[k]) - 0.5*d*d - math.Log(z.sigmas[k]) - logSqrt2Pi - z.logZ[k]
	}
	return logSumExp(terms)
}

// logMass is the log probability of [x-0.5, x+0.5]: an Int's value x.
func (z *parzen) logMass(x float64) float64 {
	terms := make([]float64, len(z.mus))
	for k, mu := range z.mus {
		s := z.sigmas[k]
		terms[k] = math.Log(z.weights[k]) + math.Log(normalMass((x-0.5-mu)/s, (x+0.5-mu)/s)) - z.logZ[k]
	}
	return logSumExp(terms)
}

// categorical is the mixture of Optuna's categorical kernels: each
// observation puts 1 on its choice and, like the prior kernel,
// priorWeight/kernels on every choice; probs is the mixture's probability of
// each choice.
type categorical struct {
	probs []float64
}

func newCategorical(n int, xs, weights []float64, priorWeight float64) *categorical {
	kernels := float64(len(xs) + 1)
	w := append(slices.Clone(weights), priorWeight)
	normalize(w)
	c := &categorical{probs: make([]float64, n)}
	smooth := priorWeight / kernels
	for k, x := range xs {
		row := smooth*float64(n) + 1
		for i := range c.probs {
			q := smooth
			if i == int(x) {
				q++
			}
			c.probs[i] += w[k] * q / row
		}
	}
	for i := range c.probs {
		c.probs[i] += w[len(xs)] / float64(n) // the prior kernel is uniform
	}
	return c
}

func (c *categorical) sample(rng *rand.Rand) float64 {
	return float64(pick(c.probs, rng.Float64()))
}

func (c *categorical) logProb(x float64) float64 { return math.Log(c.probs[int(x)]) }

// pick returns the index whose cumulative weight first exceeds u·total.
func pick(weights []float64, u float64) int {
	var total float64
	for _, w := range weights {
		total += w
	}
	u *= total
	for i, w := range weights {
		if u < w {
			return i
		}
		u -= w
	}
	return len(weights) - 1 // rounding left u at the very end
}

func normalize(w []float64) {
	var total float64
	for _, v := range w {
		total += v
	}
	for i := range w {
		w[i] /= total
	}
}

var logSqrt2Pi = 0.5 * math.Log(2*math.Pi)

func normalCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

func normalQuantile(u float64) float64 { return -math.Sqrt2 * math.Erfcinv(2*u) }

// normalMass is Φ(b) − Φ(a) for a ≤ b, computed in the tail where both lie
// so it keeps its precision far from the mean; for an interval too narrow
// for the difference to hold any digits, the density times the width.
func normalMass(a, b float64) float64 {
	if b-a < 1e-7 {
		m := (a + b) / 2
		return math.Exp(-0.5*m*m-logSqrt2Pi) * (b - a)
	}
	switch {
	case a >= 0:
		return 0.5 * (math.Erfc(a/math.Sqrt2) - math.Erfc(b/math.Sqrt2))
	case b <= 0:
		return 0.5 * (math.Erfc(-b/math.Sqrt2) - math.Erfc(-a/math.Sqrt2))
	}
	return 1 - 0.5*math.Erfc(b/math.Sqrt2) - 0.5*math.Erfc(-a/math.Sqrt2)
}

func logSumExp(xs []float64) float64 {
	m := math.Inf(-1)
	for _, x := range xs {
		m = max(m, x)
	}
	if math.IsInf(m, -1) {
		return m
	}
	var s float64
	for _, x := range xs {
		s += math.Exp(x - m)
	}
	return m + math.Log(s)
}
