package sweep

import (
	"cmp"
	"math"
	"slices"
)

// DefaultMaxPoints is the most points a group's curve has unless
// Summarize is told otherwise: about one per pixel of a wide chart.
const DefaultMaxPoints = 1000

// slot accumulates the values at one step (or in one bucket) with
// Welford's online algorithm: one pass, numerically stable.
type slot struct {
	step, mean, m2 float64
	lo, hi         float64
	n              int
}

func (s *slot) add(v float64) {
	if s.n == 0 || v < s.lo {
		s.lo = v
	}
	if s.n == 0 || v > s.hi {
		s.hi = v
	}
	s.n++
	d := v - s.mean
	s.mean += d / float64(s.n)
	s.m2 += d * (v - s.mean)
}

func (s *slot) point() Point {
	p := Point{Step: s.step, Mean: s.mean, N: s.n, Min: s.lo, Max: s.hi}
	if s.n > 1 {
		p.Std = math.Sqrt(max(s.m2, 0) / float64(s.n-1))
	}
	return p
}

// curve accumulates a group's series. Runs that log at the same steps (the
// usual case: every n updates, every episode) align on exact steps. Runs
// that log at steps of their own (an episode's return at the global step
// where it ended) would give points of one run each, so their curve is
// bucketed: as many buckets as the longest run has points, at most
// maxPoints. The exact steps are used when the group has at most maxPoints
// distinct steps and, for two runs or more, its steps average at least 1.5
// runs each.
type curve struct {
	maxPoints int
	// series are the group's series as added (after finitePerStep), kept
	// for bucketing; lo and hi are their smallest and largest step, total
	// counts their points and longest is the most one of them has.
	series         [][][2]float64
	lo, hi         float64
	total, longest int
	// bucketed is set once the exact slots exceed maxPoints; the exact
	// state below is then dropped.
	bucketed bool

	slots []slot
	// hint[j] is the slot of the j-th point of the previous series: runs of
	// one group usually log the same steps, so a point finds its slot there.
	hint []int32
	// index maps step → slot. Until a step arrives that would go between
	// two slots, slots are in step order, found by binary search, and the
	// index is nil: a group whose runs log their steps in one order never
	// builds it.
	index map[float64]int32
}

func (c *curve) add(pts [][2]float64) {
	pts = finitePerStep(pts)
	if len(pts) == 0 {
		return
	}
	if len(c.series) == 0 {
		c.lo, c.hi = pts[0][0], pts[len(pts)-1][0]
	}
	c.lo, c.hi = min(c.lo, pts[0][0]), max(c.hi, pts[len(pts)-1][0])
	c.series = append(c.series, pts)
	c.total += len(pts)
	c.longest = max(c.longest, len(pts))
	if c.bucketed {
		return
	}
	if c.slots == nil {
		c.slots = make([]slot, 0, len(pts))
		c.hint = make([]int32, 0, len(pts))
	}
	for j, p := range pts {
		var k int32
		if j < len(c.hint) && c.slots[c.hint[j]].step == p[0] {
			k = c.hint[j]
		} else {
			k = c.slotOf(p[0])
		}
		if len(c.slots) > c.maxPoints {
			c.bucketed, c.slots, c.hint, c.index = true, nil, nil, nil
			return
		}
		if j < len(c.hint) {
			c.hint[j] = k
		} else {
			c.hint = append(c.hint, k)
		}
		c.slots[k].add(p[1])
	}
}

// slotOf finds or makes the slot of step.
func (c *curve) slotOf(step float64) int32 {
	if c.index == nil {
		i, found := slices.BinarySearchFunc(c.slots, step, func(s slot, step float64) int { return cmp.Compare(s.step, step) })
		if found {
			return int32(i)
		}
		if i == len(c.slots) {
			c.slots = append(c.slots, slot{step: step})
			return int32(i)
		}
		// Sized for the most slots the exact steps may have, so neither
		// grows again.
		c.index = make(map[float64]int32, c.maxPoints+1)
		c.slots = slices.Grow(c.slots, c.maxPoints+1-len(c.slots))
		for i, s := range c.slots {
			c.index[s.step] = int32(i)
		}
	}
	if k, ok := c.index[step]; ok {
		return k
	}
	k := int32(len(c.slots))
	c.slots = append(c.slots, slot{step: step})
	c.index[step] = k
	return k
}

func (c *curve) points() []Point {
	if len(c.series) == 0 {
		return nil
	}
	if c.bucketed || (len(c.series) > 1 && 2*c.total < 3*len(c.slots)) {
		return c.buckets(min(c.longest, c.maxPoints))
	}
	slices.SortFunc(c.slots, func(a, b slot) int { return cmp.Compare(a.step, b.step) })
	out := make([]Point, len(c.slots))
	for i := range c.slots {
		out[i] = c.slots[i].point()
	}
	return out
}

// buckets cuts [lo, hi] into n buckets of equal width. Each run gives a
// bucket one value, the mean of its points in it, so N counts runs and the
// std is the spread across runs, not within one. A point's step is the mean
// step of the points in its bucket, where the data is; empty buckets give
// no point.
func (c *curve) buckets(n int) []Point {
	// Halves, so hi - lo cannot overflow; hi > lo, as the group has more
	// than one distinct step.
	span := c.hi/2 - c.lo/2
	acc := make([]slot, n)
	stepSum := make([]float64, n)
	stepN := make([]int, n)
	for _, pts := range c.series {
		cur, sum, cnt := -1, 0.0, 0
		flush := func() {
			if cnt > 0 {
				acc[cur].add(sum / float64(cnt))
			}
		}
		for _, p := range pts {
			b := 0
			if n > 1 {
				b = min(max(int((p[0]/2-c.lo/2)/span*float64(n)), 0), n-1)
			}
			if b != cur {
				flush()
				cur, sum, cnt = b, 0, 0
			}
			sum += p[1]
			cnt++
			stepSum[b] += p[0]
			stepN[b]++
		}
		flush()
	}
	out := make([]Point, 0, n)
	for b := range acc {
		if acc[b].n == 0 {
			continue
		}
		acc[b].step = stepSum[b] / float64(stepN[b])
		out = append(out, acc[b].point())
	}
	return out
}

// finitePerStep returns pts with strictly increasing finite steps and
// finite values: pts itself when it already is (a store's answer), else a
// sorted copy without the non-finite points, keeping the last value logged
// at each step.
func finitePerStep(pts [][2]float64) [][2]float64 {
	clean := true
	for i, p := range pts {
		if !finite(p[0]) || !finite(p[1]) || (i > 0 && !(p[0] > pts[i-1][0])) {
			clean = false
			break
		}
	}
	if clean {
		return pts
	}
	cp := make([][2]float64, 0, len(pts))
	for _, p := range pts {
		if finite(p[0]) && finite(p[1]) {
			cp = append(cp, p)
		}
	}
	slices.SortStableFunc(cp, func(a, b [2]float64) int { return cmp.Compare(a[0], b[0]) })
	out := cp[:0]
	for _, p := range cp {
		if n := len(out); n > 0 && out[n-1][0] == p[0] {
			out[n-1] = p
		} else {
			out = append(out, p)
		}
	}
	return out
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
