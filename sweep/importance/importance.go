package importance

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/rlsched/rlsched/sweep/tpe"
)

// Importance is one param's share of the objective's explained error.
type Importance struct {
	Param string  `json:"param"`
	Value float64 `json:"value"`
}

// Options tune the forest; the zero value is the defaults.
type Options struct {
	// Trees is the forest's size (default 100).
	Trees int
	// MinLeaf is the fewest trials in a leaf (default 2).
	MinLeaf int
}

// MinTrials is the fewest trials with a value Permutation works on: below
// it there is no out-of-bag sample worth the name.
const MinTrials = 8

const maxDepth = 16

// Permutation returns the importance for y of each param of space, sorted
// from the most important (equal values by name). x[i] are trial i's
// values, one per param, a categorical as its choice's index (a sweep's
// Spec.Point); a trial whose y is NaN is left out. When y is constant, or no
// param explains any of it, every value is 0. Numeric values need no
// transform: a tree's splits depend only on their order, so a log scale
// changes nothing.
func Permutation(space tpe.Space, x [][]float64, y []float64, rng *rand.Rand, opt Options) ([]Importance, error) {
	if len(x) != len(y) {
		return nil, fmt.Errorf("%d trials of params for %d values; give one value per trial", len(x), len(y))
	}
	if opt.Trees <= 0 {
		opt.Trees = 100
	}
	if opt.MinLeaf <= 0 {
		opt.MinLeaf = 2
	}
	var rows []int
	for i, v := range y {
		if len(x[i]) != len(space) {
			return nil, fmt.Errorf("trial %d has %d params; want %d", i, len(x[i]), len(space))
		}
		for j, p := range x[i] {
			if math.IsNaN(p) || math.IsInf(p, 0) {
				return nil, fmt.Errorf("trial %d: param %q is %v", i, space[j].Name, p)
			}
		}
		if !math.IsNaN(v) {
			rows = append(rows, i)
		}
	}
	if len(rows) < MinTrials {
		return nil, fmt.Errorf("%d trials have a value; importance needs at least %d", len(rows), MinTrials)
	}

	rise := make([]float64, len(space))
	g := &grower{space: space, x: x, y: y, minLeaf: opt.MinLeaf, maxDepth: maxDepth,
		mtry: max(1, len(space)/3), rng: rng}
	inBag := make([]bool, len(y))
	for range opt.Trees {
		clear(inBag)
		bag := make([]int, len(rows))
		for i := range bag {
			bag[i] = rows[rng.IntN(len(rows))]
			inBag[bag[i]] = true
		}
		var oob []int
		for _, r := range rows {
			if !inBag[r] {
				oob = append(oob, r)
			}
		}
		g.t = nil
		g.grow(bag, 0)
		if len(oob) < 2 {
			continue
		}
		base := g.t.oobError(x, y, oob, -1, nil)
		for f := range space {
			rise[f] += g.t.oobError(x, y, oob, f, rng.Perm(len(oob))) - base
		}
	}

	var total float64
	for f := range rise {
		rise[f] = max(rise[f], 0)
		total += rise[f]
	}
	out := make([]Importance, len(space))
	for f, p := range space {
		out[f] = Importance{Param: p.Name}
		if total > 0 {
			out[f].Value = rise[f] / total
		}
	}
	slices.SortStableFunc(out, func(a, b Importance) int {
		if c := cmp.Compare(b.Value, a.Value); c != 0 {
			return c
		}
		return cmp.Compare(a.Param, b.Param)
	})
	return out, nil
}

// oobError is the tree's mean squared error over the out-of-bag rows, with
// feature f's values shuffled among them by perm when f ≥ 0.
func (t tree) oobError(x [][]float64, y []float64, oob []int, f int, perm []int) float64 {
	var sse float64
	var row []float64
	for i, r := range oob {
		xi := x[r]
		if f >= 0 {
			row = append(row[:0], xi...)
			row[f] = x[oob[perm[i]]][f]
			xi = row
		}
		d := t.predict(xi) - y[r]
		sse += d * d
	}
	return sse / float64(len(oob))
}
