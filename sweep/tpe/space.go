package tpe

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// maxExactInt bounds an Int's bounds, so each of its values is a float64
// and their count an int64.
const maxExactInt = 1 << 53

// Kind is how a param's values are spread.
type Kind int

const (
	// Uniform is a float in [Min, Max].
	Uniform Kind = iota + 1
	// LogUniform is a float in [Min, Max] (Min > 0) searched on a log scale.
	LogUniform
	// Int is an integer in [Min, Max], both included.
	Int
	// Categorical is one of N unordered choices, written as its index
	// 0..N-1 (a choice param's values, or a grid axis's).
	Categorical
)

// Param is one dimension of a Space.
type Param struct {
	Name string
	Kind Kind
	// Min and Max bound Uniform, LogUniform and Int.
	Min, Max float64
	// N counts a Categorical's choices.
	N int
}

// Space is the params Suggest chooses, in the order of a Trial's Params.
type Space []Param

// Validate refuses a param Suggest cannot sample, naming it.
func (s Space) Validate() error {
	for _, p := range s {
		switch p.Kind {
		case Categorical:
			if p.N < 1 {
				return fmt.Errorf("param %q: a categorical needs at least one choice", p.Name)
			}
			continue
		case Uniform, LogUniform, Int:
		default:
			return fmt.Errorf("param %q: unknown kind %d", p.Name, p.Kind)
		}
		if math.IsNaN(p.Min) || math.IsNaN(p.Max) || math.IsInf(p.Min, 0) || math.IsInf(p.Max, 0) || p.Min > p.Max {
			return fmt.Errorf("param %q: needs finite bounds, min ≤ max", p.Name)
		}
		if p.Kind == Uniform && math.IsInf(p.Max-p.Min, 0) {
			return fmt.Errorf("param %q: max − min overflows a float64; narrow the range", p.Name)
		}
		if p.Kind == LogUniform && p.Min <= 0 {
			return fmt.Errorf("param %q: loguniform needs min > 0", p.Name)
		}
		if p.Kind == Int && (p.Min != math.Trunc(p.Min) || p.Max != math.Trunc(p.Max) ||
			math.Abs(p.Min) > maxExactInt || math.Abs(p.Max) > maxExactInt) {
			return fmt.Errorf("param %q: int needs integer bounds within ±2^53", p.Name)
		}
	}
	return nil
}

// Contains reports whether v is a value of p.
func (p Param) Contains(v float64) bool {
	if math.IsNaN(v) {
		return false
	}
	switch p.Kind {
	case Categorical:
		return v == math.Trunc(v) && v >= 0 && v < float64(p.N)
	case Int:
		return v == math.Trunc(v) && v >= p.Min && v <= p.Max
	default:
		return v >= p.Min && v <= p.Max
	}
}

// domain is where p's kernels live: the log of a LogUniform, and an Int
// widened by half a step each side so every integer gets the same width.
func (p Param) domain() (lo, hi float64) {
	switch p.Kind {
	case LogUniform:
		return math.Log(p.Min), math.Log(p.Max)
	case Int:
		return p.Min - 0.5, p.Max + 0.5
	}
	return p.Min, p.Max
}

// toDomain maps a value of p into its domain.
func (p Param) toDomain(v float64) float64 {
	if p.Kind == LogUniform {
		return math.Log(v)
	}
	return v
}

// fromDomain maps a point of p's domain back to a value of p: rounded for
// an Int, and clamped, since exp and rounding may step past a bound.
func (p Param) fromDomain(x float64) float64 {
	switch p.Kind {
	case LogUniform:
		x = math.Exp(x)
	case Int:
		x = math.Round(x)
	}
	return min(max(x, p.Min), p.Max)
}

// sampleUniform draws a value of p from its prior: uniform in its domain,
// each choice as likely.
func (p Param) sampleUniform(rng *rand.Rand) float64 {
	switch p.Kind {
	case Categorical:
		return float64(rng.IntN(p.N))
	case Int:
		return p.Min + float64(rng.Int64N(int64(p.Max-p.Min)+1))
	}
	lo, hi := p.domain()
	u := rng.Float64()
	// lo*(1-u) + hi*u, not lo + (hi-lo)*u: hi-lo may overflow.
	return p.fromDomain(lo*(1-u) + hi*u)
}
