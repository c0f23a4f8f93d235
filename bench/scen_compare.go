package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rlsched/rlsched/stats"
)

// runCompare times the comparison estimators (package stats, GET
// /api/compare's work) in this process at the issue 30 sizes: IQM with 95%
// intervals at 2,000 stratified bootstrap reps for 100 groups × 10 seeds ×
// 5 tasks, and IQM curves for 20 groups × 10 seeds × 1,000 points. Beside
// each, in the same run, the textbook bootstrap over the same data: every
// replicate materialised and sorted.
func runCompare(e *env) (*report, error) {
	reps := pick(e, 500, 2000)
	repeats := pick(e, 3, 5)
	groups, seeds, tasks := 100, 10, 5
	cGroups, points := 20, pick(e, 200, 1000)
	rep := &report{size: fmt.Sprintf("%d groups × %d seeds × %d tasks; curves %d groups × %d seeds × %s points; %s reps, median of %d",
		groups, seeds, tasks, cGroups, seeds, human(float64(points)), human(float64(reps)), repeats)}

	rng := rand.New(rand.NewPCG(30, 1))
	req := stats.Request{Stats: []stats.Stat{stats.StatIQM}, Options: stats.DefaultOptions()}
	req.Reps = reps
	for g := range groups {
		var sg stats.Group
		for range tasks {
			var xs []float64
			for range seeds {
				xs = append(xs, rng.NormFloat64()+float64(g)/float64(groups))
			}
			sg.Scores = append(sg.Scores, xs)
		}
		req.Groups = append(req.Groups, sg)
	}
	cgs := make([]stats.CurveGroup, cGroups)
	for g := range cgs {
		var runs [][]float64
		for range seeds {
			s, v := make([]float64, points), 0.0
			for i := range s {
				v += rng.NormFloat64() * 0.1
				s[i] = v
			}
			runs = append(runs, s)
		}
		cgs[g].Series = [][][]float64{runs}
	}
	grid := make([]float64, points)
	for i := range grid {
		grid[i] = float64(i)
	}

	timeIt := func(name string, f func() error) (time.Duration, error) {
		var ds []time.Duration
		for range repeats {
			t0 := time.Now()
			if err := f(); err != nil {
				return 0, fmt.Errorf("%s: %w", name, err)
			}
			ds = append(ds, time.Since(t0))
		}
		slices.Sort(ds)
		e.logf("%s: %v", name, ds[len(ds)/2])
		return ds[len(ds)/2], nil
	}
	var res stats.Result
	agg, err := timeIt("stats.Compare", func() (err error) { res, err = stats.Compare(req); return err })
	if err != nil {
		return nil, err
	}
	var naive []stats.Interval
	aggNaive, _ := timeIt("naive IQM", func() error { naive = naiveIQM(req); return nil })
	var cs [][]stats.CurvePoint
	curves, err := timeIt("stats.Curves", func() (err error) { cs, err = stats.Curves(cgs, grid, req.Options); return err })
	if err != nil {
		return nil, err
	}
	var ncs [][]stats.Interval
	curvesNaive, _ := timeIt("naive curves", func() error { ncs = naiveCurves(cgs, req.Options); return nil })
	// The naive bootstraps draw from the same streams in the same order, so
	// both make the same replicates: equal points, intervals equal but for
	// rounding (the order of a sum).
	worst := 0.0
	for g, gr := range res.Groups {
		iv := gr.Stats[stats.StatIQM]
		if iv.Value != naive[g].Value {
			return nil, fmt.Errorf("group %d: IQM %v, naive %v", g, iv.Value, naive[g].Value)
		}
		worst = max(worst, math.Abs(iv.Lo-naive[g].Lo)/(iv.Hi-iv.Lo), math.Abs(iv.Hi-naive[g].Hi)/(iv.Hi-iv.Lo))
	}
	for g, c := range cs {
		for f, p := range c {
			w := max(p.Hi-p.Lo, 1e-300)
			worst = max(worst, math.Abs(p.Lo-ncs[g][f].Lo)/w, math.Abs(p.Hi-ncs[g][f].Hi)/w)
		}
	}

	t := rep.newTable("IQM with 95% intervals", "what", "stats (rlsched)", "naive textbook", "ratio")
	ratio := func(a, b time.Duration) string { return fmt.Sprintf("%.3f", a.Seconds()/b.Seconds()) }
	t.add(fmt.Sprintf("IQM, %d groups × %d seeds × %d tasks, %s reps", groups, seeds, tasks, human(float64(reps))), ms(agg), ms(aggNaive), ratio(agg, aggNaive))
	t.add(fmt.Sprintf("IQM curves, %d groups × %d seeds × %s points, %s reps", cGroups, seeds, human(float64(points)), human(float64(reps))),
		ms(curves), ms(curvesNaive), ratio(curves, curvesNaive))
	rep.goal(agg <= 300*time.Millisecond, "IQM with 95%% CIs (%s reps) for %d groups × %d seeds × %d tasks in ≤ 300 ms: %s",
		human(float64(reps)), groups, seeds, tasks, ms(agg))
	rep.goal(curves <= 500*time.Millisecond, "IQM curves for %d groups × %d seeds × %s points in ≤ 500 ms: %s",
		cGroups, seeds, human(float64(points)), ms(curves))
	rep.note("In process, the groups spread over GOMAXPROCS goroutines. stats keeps a replicate as counts over each group's scores sorted once (no sort, no allocation per replicate); the naive bootstrap, on one goroutine, materialises and sorts every replicate. Both draw the same replicates from the same PCG streams: their point estimates are equal and their interval ends differ by at most %.2g of the interval's width (rounding).", worst)
	rep.result = result{metric: "compare_iqm_ms", value: float64(agg.Microseconds()) / 1e3, unit: "ms", ref: "naive_iqm",
		refValue: float64(aggNaive.Microseconds()) / 1e3}
	return rep, nil
}

// naiveIQM is the textbook stratified bootstrap of each group's IQM: per
// replicate, each task's runs drawn with replacement into a new slice,
// sorted, trimmed, averaged; then the replicates sorted for the
// percentiles.
func naiveIQM(r stats.Request) []stats.Interval {
	out := make([]stats.Interval, len(r.Groups))
	for g, sg := range r.Groups {
		rng := rand.New(rand.NewPCG(r.Seed, uint64(g)))
		est := make([]float64, r.Reps)
		for rep := range est {
			var pooled []float64
			for _, xs := range sg.Scores {
				for range xs {
					pooled = append(pooled, xs[rng.IntN(len(xs))])
				}
			}
			est[rep] = trimMean(pooled)
		}
		out[g] = stats.Interval{Value: stats.IQM(sg.Scores), Lo: sortedPercentile(est, (1-r.CI)/2), Hi: sortedPercentile(est, (1+r.CI)/2)}
	}
	return out
}

// naiveCurves is naiveIQM at every grid step, one resample of the runs per
// replicate for the whole curve.
func naiveCurves(cgs []stats.CurveGroup, o stats.Options) [][]stats.Interval {
	out := make([][]stats.Interval, len(cgs))
	for g, cg := range cgs {
		runs := cg.Series[0]
		points := len(runs[0])
		rng := rand.New(rand.NewPCG(o.Seed, uint64(g)))
		est := make([][]float64, points)
		for rep := 0; rep < o.Reps; rep++ {
			pick := make([]int, len(runs))
			for i := range pick {
				pick[i] = rng.IntN(len(runs))
			}
			for f := range points {
				at := make([]float64, len(runs))
				for i, j := range pick {
					at[i] = runs[j][f]
				}
				est[f] = append(est[f], trimMean(at))
			}
		}
		for f := range points {
			out[g] = append(out[g], stats.Interval{Lo: sortedPercentile(est[f], (1-o.CI)/2), Hi: sortedPercentile(est[f], (1+o.CI)/2)})
		}
	}
	return out
}

func trimMean(xs []float64) float64 {
	slices.Sort(xs)
	k := len(xs) / 4
	s := 0.0
	for _, x := range xs[k : len(xs)-k] {
		s += x
	}
	return s / float64(len(xs)-2*k)
}

func sortedPercentile(xs []float64, q float64) float64 {
	slices.Sort(xs)
	h := float64(len(xs)-1) * q
	i := int(math.Floor(h))
	if i+1 >= len(xs) {
		return xs[i]
	}
	return xs[i] + (h-float64(i))*(xs[i+1]-xs[i])
}
