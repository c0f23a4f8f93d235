// Package goal is the direction of a sweep's objective (API.md "Sweep search
// and early stopping"): whether a larger or a smaller metric is better. The
// search (sweep/tpe), the early stopping (sweep/earlystop) and the spec
// (sweep) share it, so "better" means one thing in all of them.
//
// It never does I/O and holds no state.
package goal

import "fmt"

// Goal is "maximize" or "minimize", as a spec writes it.
type Goal string

const (
	Maximize Goal = "maximize"
	Minimize Goal = "minimize"
)

// Parse reads a spec's goal; the empty string is Maximize, the goal of a
// reward.
func Parse(s string) (Goal, error) {
	switch Goal(s) {
	case "", Maximize:
		return Maximize, nil
	case Minimize:
		return Minimize, nil
	}
	return "", fmt.Errorf("must be %q or %q", Maximize, Minimize)
}

// Loss turns v into a value to minimise: v itself under Minimize, −v under
// Maximize (and under an invalid goal, the zero Goal included, so the zero
// value maximises as Parse("") does).
func (g Goal) Loss(v float64) float64 {
	if g == Minimize {
		return v
	}
	return -v
}

// Better reports whether a is strictly better than b.
func (g Goal) Better(a, b float64) bool { return g.Loss(a) < g.Loss(b) }
