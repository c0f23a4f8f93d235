package stats

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
)

// Sample-efficiency curves: a group's IQM at each step of a grid, with
// its interval. Each run's series is aligned on the grid by its last value
// at or before the step, so every run counts at every step of the grid.

// MaxGridPoints bounds a curve's grid.
const MaxGridPoints = 1_000

// MaxCurveWork bounds reps × series × grid points summed over groups:
// about a second on one core.
const MaxCurveWork = 1_000_000_000

// Grid is the common step grid of points steps evenly spaced from the
// latest first step of any series to the latest last step (so that every
// series has a value at every step); series are [step, value] in step
// order, empty ones ignored. nil when no series has a point.
func Grid(series [][][2]float64, points int) []float64 {
	first, last, any := 0.0, 0.0, false
	for _, s := range series {
		if len(s) == 0 {
			continue
		}
		if !any {
			first, last, any = s[0][0], s[len(s)-1][0], true
		}
		first, last = max(first, s[0][0]), max(last, s[len(s)-1][0])
	}
	if !any {
		return nil
	}
	if points < 2 || first == last {
		return []float64{last}
	}
	g := make([]float64, points)
	for i := range g {
		g[i] = first + (last-first)*float64(i)/float64(points-1)
	}
	g[points-1] = last
	return g
}

// Align is series (in step order) on grid (ascending): at each step the
// value of its last point at or before the step; ok is false when the
// series starts after the grid does.
func Align(series [][2]float64, grid []float64, dst []float64) (out []float64, ok bool) {
	out = slices.Grow(dst[:0], len(grid))
	j := -1
	for _, g := range grid {
		for j+1 < len(series) && series[j+1][0] <= g {
			j++
		}
		if j < 0 {
			return out, false
		}
		out = append(out, series[j][1])
	}
	return out, true
}

// CurveGroup is one group of a curve: Series[t] are its runs' values in
// task t, each aligned on the grid (len(grid) values, all finite).
type CurveGroup struct {
	Series [][][]float64
}

// CurvePoint is a group's IQM at Step with its interval.
type CurvePoint struct {
	Step float64
	Interval
}

// Curves are the IQM curves of groups on grid with their intervals. A
// replicate resamples each group's runs within each task once for the
// whole curve (as rliable does), and is kept as counts over the runs; at
// each step the runs are walked in their order there, sorted once. It is
// safe to call from several goroutines at once.
func Curves(groups []CurveGroup, grid []float64, o Options) ([][]CurvePoint, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	switch {
	case len(groups) == 0:
		return nil, errors.New("no group to compare: the selection has no run with a series")
	case len(groups) > MaxGroups:
		return nil, fmt.Errorf("%d groups: at most %d groups", len(groups), MaxGroups)
	case len(grid) == 0 || len(grid) > MaxGridPoints:
		return nil, fmt.Errorf("%d grid points: 1..%d", len(grid), MaxGridPoints)
	}
	work := 0
	for gi, g := range groups {
		n := 0
		for _, ss := range g.Series {
			for _, s := range ss {
				if len(s) != len(grid) {
					return nil, fmt.Errorf("BUG: a series of %d values on a grid of %d", len(s), len(grid))
				}
				for _, v := range s {
					if !finite(v) {
						return nil, fmt.Errorf("group %d: a value is %g; drop such points first", gi, v)
					}
				}
			}
			n += len(ss)
		}
		if n == 0 {
			return nil, fmt.Errorf("group %d has no series", gi)
		}
		work += o.Reps * n * len(grid)
	}
	if work > MaxCurveWork {
		return nil, fmt.Errorf("reps × series × grid points is %d: at most %d; ask for fewer reps or points", work, MaxCurveWork)
	}
	out := make([][]CurvePoint, len(groups))
	ws := make([]curveBoot, min(len(groups), runtime.GOMAXPROCS(0)))
	eachGroup(len(groups), func(w, gi int) { out[gi] = ws[w].curve(groups[gi], gi, grid, o, maxCachedCounts) })
	return out, nil
}

type runAt struct {
	v   float64
	run int32
}

// curveBoot is a group's bootstrap over its runs' curves, and a
// goroutine's scratch space over the groups it does.
type curveBoot struct {
	runs    [][]float64 // runs[r][f]: run r's value at grid step f
	order   []runAt     // order[f*n:(f+1)*n]: every run's value at step f, ascending
	tasks   [][]int32   // the runs (indexes) of each task that has any
	counts  []int32     // a replicate: how often each run was drawn
	all     []int32     // every replicate's counts, when they fit (maxCachedCounts)
	n       int
	est     []float64 // a block of steps: est[rep*block+j] for step f0+j
	byStep  []float64 // the block transposed: byStep[j*reps+rep]
	scratch []float64
}

// frameBlock is how many grid steps a pass over the replicates covers: the
// replicates' estimates of a block (reps × frameBlock) stay in the cache,
// where those of a whole 1,000-step curve (16 MiB at 2,000 reps) did not.
const frameBlock = 32

// maxCachedCounts bounds the replicates' counts a curve keeps (4 MiB):
// within it they are drawn once; beyond it each block of steps replays
// them.
const maxCachedCounts = 1 << 20

// curve is the IQM curve of group g (number gi) with its intervals. The
// whole curve is one resample per replicate: every block of steps sees the
// same replicates, kept (maxCachedCounts) or drawn again from the stream
// seeded again.
// cacheLimit is maxCachedCounts (tests give 0, to replay).
func (c *curveBoot) curve(g CurveGroup, gi int, grid []float64, o Options, cacheLimit int) []CurvePoint {
	c.reset(g, len(grid))
	pcg := rand.NewPCG(o.Seed, uint64(gi))
	rng := rand.New(pcg)
	n := c.n
	cached := o.Reps*n <= cacheLimit
	if cached {
		c.all = slices.Grow(c.all[:0], o.Reps*n)[:o.Reps*n]
		for rep := range o.Reps {
			c.draw(rng)
			copy(c.all[rep*n:], c.counts)
		}
	}
	nb := min(frameBlock, len(grid))
	c.est = slices.Grow(c.est[:0], o.Reps*nb)[:o.Reps*nb]
	c.byStep = slices.Grow(c.byStep[:0], o.Reps*nb)[:o.Reps*nb]
	qlo, qhi := o.quantiles()
	pts := make([]CurvePoint, len(grid))
	for f0 := 0; f0 < len(grid); f0 += frameBlock {
		nb := min(frameBlock, len(grid)-f0)
		if !cached {
			pcg.Seed(o.Seed, uint64(gi))
		}
		for rep := range o.Reps {
			counts := c.counts
			if cached {
				counts = c.all[rep*n : (rep+1)*n]
			} else {
				c.draw(rng)
			}
			c.replicate(c.est[rep*nb:(rep+1)*nb], f0, counts)
		}
		transpose(c.byStep, c.est[:o.Reps*nb], o.Reps, nb)
		for j := range nb {
			e := c.byStep[j*o.Reps : (j+1)*o.Reps]
			f := f0 + j
			lo, hi := interval(e, qlo, qhi, &c.scratch)
			pts[f] = CurvePoint{grid[f], Interval{c.point(f), lo, hi}}
		}
	}
	return pts
}

// transpose writes src (rows × cols) into dst (cols × rows), in blocks
// that stay in the cache.
func transpose(dst, src []float64, rows, cols int) {
	const blk = 32
	for i0 := 0; i0 < rows; i0 += blk {
		for j0 := 0; j0 < cols; j0 += blk {
			for i := i0; i < min(i0+blk, rows); i++ {
				for j := j0; j < min(j0+blk, cols); j++ {
					dst[j*rows+i] = src[i*cols+j]
				}
			}
		}
	}
}

func (c *curveBoot) reset(g CurveGroup, points int) {
	c.tasks = c.tasks[:0]
	c.runs = c.runs[:0]
	for _, ss := range g.Series {
		if len(ss) == 0 {
			continue
		}
		ids := make([]int32, len(ss))
		for j, s := range ss {
			ids[j] = int32(len(c.runs))
			c.runs = append(c.runs, s)
		}
		c.tasks = append(c.tasks, ids)
	}
	n := len(c.runs)
	c.n = n
	c.counts = make([]int32, n)
	c.order = slices.Grow(c.order[:0], points*n)[:points*n]
	for f := range points {
		o := c.order[f*n : (f+1)*n]
		for r, s := range c.runs {
			o[r] = runAt{s[f], int32(r)}
		}
		slices.SortFunc(o, func(a, b runAt) int { return cmp.Compare(a.v, b.v) })
	}
}

func (c *curveBoot) draw(rng *rand.Rand) {
	clear(c.counts)
	for _, ids := range c.tasks {
		n := uint32(len(ids))
		for range n {
			c.counts[ids[rng.Uint32N(n)]]++
		}
	}
}

// replicate writes the replicate's IQM at grid steps f0, f0+1, ... into est: the
// sum of every draw (each drawn run's curve added in, a run at a time)
// less the k smallest and the k largest draws at the step, which are a few
// entries from each end of the step's order. No walk of all the runs with
// a branch on each, no sort.
func (c *curveBoot) replicate(est []float64, f0 int, counts []int32) {
	n := c.n
	k := int32(trimmed(n))
	clear(est)
	for r, cnt := range counts {
		if cnt == 0 {
			continue
		}
		w, s := float64(cnt), c.runs[r][f0:f0+len(est)]
		s = s[:len(est)] // one bounds check for the loop
		for f := range est {
			est[f] += w * s[f]
		}
	}
	inv := 1 / float64(int32(n)-2*k)
	if k == 0 {
		for f := range est {
			est[f] *= inv
		}
		return
	}
	for j := range est {
		f := f0 + j
		o := c.order[f*n : (f+1)*n]
		s := est[j]
		// No branch on whether a run was drawn: one that was not takes 0.
		for i, need := 0, k; need > 0; i++ {
			take := min(counts[o[i].run], need)
			s -= float64(take) * o[i].v
			need -= take
		}
		for i, need := n-1, k; need > 0; i-- {
			take := min(counts[o[i].run], need)
			s -= float64(take) * o[i].v
			need -= take
		}
		est[j] = s * inv
	}
}

// point is the IQM of the runs themselves at grid step f.
func (c *curveBoot) point(f int) float64 {
	k := trimmed(c.n)
	s := 0.0
	for _, ra := range c.order[f*c.n+k : (f+1)*c.n-k] {
		s += ra.v
	}
	return s / float64(c.n-2*k)
}

// FinitePoints is series without its points whose value is NaN or ±Inf,
// and how many it dropped; series itself is not changed.
func FinitePoints(series [][2]float64) ([][2]float64, int) {
	kept := make([][2]float64, 0, len(series))
	for _, p := range series {
		if finite(p[1]) {
			kept = append(kept, p)
		}
	}
	return kept, len(series) - len(kept)
}
