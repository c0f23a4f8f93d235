package tpe

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/rlsched/rlsched/sweep/goal"
)

// Trial is one proposal: its Params in the order of the Space (a
// Categorical as its choice's index), where it stands and its objective
// Value. A finished or stopped trial whose Value is NaN (a member that
// reported no metric) is skipped.
type Trial struct {
	Params []float64
	Value  float64
	State  State
	// Step is where a Stopped trial was stopped.
	Step int64
}

// State is where a trial stands, which ranks it before its value does, as
// Optuna ranks complete, pruned and (with its constant liar) running
// trials.
type State int

const (
	// Finished ran to its end; Value is its objective.
	Finished State = iota
	// Stopped was stopped early at Step; Value is its last report. It ranks
	// below every finished trial, a later Step above an earlier.
	Stopped
	// Running is proposed and not ended; Value is ignored. It ranks below
	// all others, so proposals made while it runs spread away from it.
	Running
)

// Options tune Suggest; the zero value is Optuna's defaults, maximising.
type Options struct {
	Goal goal.Goal
	// StartupTrials is how many trials are drawn at random before the
	// estimators are used (default 10).
	StartupTrials int
	// EICandidates is how many candidates of each param are drawn from the
	// good trials' estimator and scored by l(x)/g(x) (default 24).
	EICandidates int
	// PriorWeight is the weight of the prior kernel (default 1).
	PriorWeight float64
}

func (o Options) withDefaults() Options {
	if o.StartupTrials <= 0 {
		o.StartupTrials = 10
	}
	if o.EICandidates <= 0 {
		o.EICandidates = 24
	}
	if o.PriorWeight <= 0 {
		o.PriorWeight = 1
	}
	return o
}

// Suggest proposes the next params, one value per param of space, each
// inside it. With fewer than StartupTrials trials (running ones included) it
// draws them at random; then it splits the trials into the good ones (the
// best gamma(n), ranked by State, then value) and the rest, and for each
// param takes, of EICandidates draws from the good trials' estimator l, the
// one with the largest l(x)/g(x), g being the rest's estimator: TPE's
// expected improvement. Equal ranks split in trial order.
//
// A trial whose Params do not fit space is an error naming it.
func Suggest(space Space, trials []Trial, rng *rand.Rand, opt Options) ([]float64, error) {
	if err := space.Validate(); err != nil {
		return nil, err
	}
	opt = opt.withDefaults()
	var kept []Trial
	for i, t := range trials {
		if t.State < Finished || t.State > Running {
			return nil, fmt.Errorf("trial %d has an unknown state %d", i, t.State)
		}
		if len(t.Params) != len(space) {
			return nil, fmt.Errorf("trial %d has %d params; the space has %d", i, len(t.Params), len(space))
		}
		for j, v := range t.Params {
			if !space[j].Contains(v) {
				return nil, fmt.Errorf("trial %d: param %q: %v is outside the space", i, space[j].Name, v)
			}
		}
		if t.State == Running || !math.IsNaN(t.Value) {
			kept = append(kept, t)
		}
	}
	out := make([]float64, len(space))
	if len(kept) < opt.StartupTrials {
		for i, p := range space {
			out[i] = p.sampleUniform(rng)
		}
		return out, nil
	}
	below, above := split(kept, opt.Goal)
	wBelow, wAbove := weights(len(below)), weights(len(above))
	for i, p := range space {
		out[i] = suggestParam(p, column(below, i), wBelow, column(above, i), wAbove, rng, opt)
	}
	return out, nil
}

// gamma is how many of n trials are the good ones (Optuna's default_gamma).
func gamma(n int) int { return min(int(math.Ceil(0.1*float64(n))), 25) }

// weights are the kernels' weights of n trials in trial order: 1 for the 25
// newest, a ramp from 1/n up to 1 for older ones (Optuna's default_weights).
func weights(n int) []float64 {
	w := make([]float64, n)
	flat := min(n, 25)
	ramp := n - flat
	for i := range w {
		switch {
		case i >= ramp:
			w[i] = 1
		case ramp == 1:
			w[i] = 1 / float64(n)
		default: // numpy.linspace(1/n, 1, ramp)
			w[i] = 1/float64(n) + (1-1/float64(n))*float64(i)/float64(ramp-1)
		}
	}
	return w
}

// split returns the best gamma(n) trials and the rest, each in trial order.
func split(trials []Trial, g goal.Goal) (below, above []Trial) {
	order := make([]int, len(trials))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ta, tb := &trials[a], &trials[b]
		if c := cmp.Compare(ta.State, tb.State); c != 0 {
			return c
		}
		switch ta.State {
		case Running:
			return 0
		case Stopped:
			if c := cmp.Compare(tb.Step, ta.Step); c != 0 {
				return c
			}
		}
		return cmp.Compare(g.Loss(ta.Value), g.Loss(tb.Value))
	})
	n := gamma(len(trials))
	good, rest := slices.Clone(order[:n]), slices.Clone(order[n:])
	slices.Sort(good)
	slices.Sort(rest)
	for _, i := range good {
		below = append(below, trials[i])
	}
	for _, i := range rest {
		above = append(above, trials[i])
	}
	return below, above
}

func column(trials []Trial, i int) []float64 {
	out := make([]float64, len(trials))
	for k, t := range trials {
		out[k] = t.Params[i]
	}
	return out
}

// suggestParam chooses one param's value: of EICandidates draws from l, the
// first with the largest log l − log g.
func suggestParam(p Param, below, wBelow, above, wAbove []float64, rng *rand.Rand, opt Options) float64 {
	var sample func() float64
	var score func(x float64) float64
	switch {
	case p.Kind == Categorical:
		if p.N == 1 {
			return 0
		}
		l := newCategorical(p.N, below, wBelow, opt.PriorWeight)
		g := newCategorical(p.N, above, wAbove, opt.PriorWeight)
		sample = func() float64 { return l.sample(rng) }
		score = func(x float64) float64 { return l.logProb(x) - g.logProb(x) }
	case p.Min == p.Max:
		return p.Min
	default:
		lo, hi := p.domain()
		l := newParzen(lo, hi, toDomain(p, below), wBelow, opt.PriorWeight)
		g := newParzen(lo, hi, toDomain(p, above), wAbove, opt.PriorWeight)
		if p.Kind == Int {
			sample = func() float64 { return p.fromDomain(l.sample(rng)) }
			score = func(x float64) float64 { return l.logMass(x) - g.logMass(x) }
		} else {
			// Candidates are scored in the domain: a log scale's Jacobian is
			// the same in l and g, so it cancels in the ratio.
			sample = func() float64 { return l.sample(rng) }
			score = func(x float64) float64 { return l.logPDF(x) - g.logPDF(x) }
		}
	}
	best, bestScore := math.NaN(), math.Inf(-1)
	for range opt.EICandidates {
		x := sample()
		if s := score(x); math.IsNaN(best) || s > bestScore {
			best, bestScore = x, s
		}
	}
	if p.Kind == Uniform || p.Kind == LogUniform {
		return p.fromDomain(best)
	}
	return best
}

func toDomain(p Param, xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = p.toDomain(x)
	}
	return out
}
