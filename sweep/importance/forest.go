package importance

import (
	"math/rand/v2"
	"slices"

	"github.com/rlsched/rlsched/sweep/tpe"
)

// node is a tree's node: a leaf with its value, or a split sending a row
// left when its feature is ≤ threshold (numeric) or == threshold
// (categorical).
type node struct {
	leaf        bool
	value       float64
	feature     int
	categorical bool
	threshold   float64
	left, right int
}

type tree []node

func goesLeft(categorical bool, threshold, v float64) bool {
	if categorical {
		return v == threshold
	}
	return v <= threshold
}

func (t tree) predict(x []float64) float64 {
	n := &t[0]
	for !n.leaf {
		if goesLeft(n.categorical, n.threshold, x[n.feature]) {
			n = &t[n.left]
		} else {
			n = &t[n.right]
		}
	}
	return n.value
}

// grower grows one tree by CART: each node splits on the best of mtry
// features drawn at random, by the largest fall in squared error.
type grower struct {
	space    tpe.Space
	x        [][]float64
	y        []float64
	minLeaf  int
	maxDepth int
	mtry     int
	rng      *rand.Rand
	t        tree
}

func (g *grower) grow(rows []int, depth int) int {
	id := len(g.t)
	g.t = append(g.t, node{leaf: true, value: g.mean(rows)})
	if depth >= g.maxDepth || len(rows) < 2*g.minLeaf || g.constant(rows) {
		return id
	}
	best := split{gain: 1e-12} // a split must lower the error by more than rounding
	for _, f := range g.rng.Perm(len(g.space))[:g.mtry] {
		if s := g.bestSplit(rows, f); s.gain > best.gain {
			best = s
		}
	}
	if best.left == nil {
		return id
	}
	left := g.grow(best.left, depth+1)
	right := g.grow(best.right, depth+1)
	g.t[id] = node{feature: best.feature, categorical: g.space[best.feature].Kind == tpe.Categorical,
		threshold: best.threshold, left: left, right: right}
	return id
}

type split struct {
	gain        float64
	feature     int
	threshold   float64
	left, right []int
}

// bestSplit finds f's best split of rows. The gain is the fall in the sum
// of squared errors: Σl²/nl + Σr²/nr − Σ²/n.
func (g *grower) bestSplit(rows []int, f int) split {
	var total float64
	for _, r := range rows {
		total += g.y[r]
	}
	n := float64(len(rows))
	base := total * total / n
	best := split{feature: f}
	gainOf := func(sumL float64, nl int) float64 {
		nr := len(rows) - nl
		if nl < g.minLeaf || nr < g.minLeaf {
			return 0
		}
		sumR := total - sumL
		return sumL*sumL/float64(nl) + sumR*sumR/float64(nr) - base
	}
	if g.space[f].Kind == tpe.Categorical {
		sums, counts := map[float64]float64{}, map[float64]int{}
		for _, r := range rows {
			sums[g.x[r][f]] += g.y[r]
			counts[g.x[r][f]]++
		}
		cats := make([]float64, 0, len(sums))
		for c := range sums {
			cats = append(cats, c)
		}
		slices.Sort(cats) // map order must not pick among equal gains
		for _, c := range cats {
			if gain := gainOf(sums[c], counts[c]); gain > best.gain {
				best.gain, best.threshold = gain, c
			}
		}
	} else {
		sorted := slices.Clone(rows)
		slices.SortStableFunc(sorted, func(a, b int) int {
			switch xa, xb := g.x[a][f], g.x[b][f]; {
			case xa < xb:
				return -1
			case xa > xb:
				return 1
			}
			return 0
		})
		var sumL float64
		for i := 0; i < len(sorted)-1; i++ {
			sumL += g.y[sorted[i]]
			lo, hi := g.x[sorted[i]][f], g.x[sorted[i+1]][f]
			if lo == hi {
				continue
			}
			if gain := gainOf(sumL, i+1); gain > best.gain {
				// The midpoint of two neighbouring floats may round to hi.
				best.gain, best.threshold = gain, lo+(hi-lo)/2
				if best.threshold >= hi {
					best.threshold = lo
				}
			}
		}
	}
	if best.gain <= 0 {
		return split{}
	}
	for _, r := range rows {
		if goesLeft(g.space[f].Kind == tpe.Categorical, best.threshold, g.x[r][f]) {
			best.left = append(best.left, r)
		} else {
			best.right = append(best.right, r)
		}
	}
	return best
}

func (g *grower) mean(rows []int) float64 {
	var s float64
	for _, r := range rows {
		s += g.y[r]
	}
	return s / float64(len(rows))
}

func (g *grower) constant(rows []int) bool {
	for _, r := range rows[1:] {
		if g.y[r] != g.y[rows[0]] {
			return false
		}
	}
	return true
}
