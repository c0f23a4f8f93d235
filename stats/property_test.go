package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// genGroup draws a group of 1–4 tasks of 0–12 runs (at least one run),
// scores from a small set so that ties are common.
func genGroup(t *rapid.T, label string) Group {
	tasks := rapid.IntRange(1, 4).Draw(t, label+"tasks")
	g := Group{Scores: make([][]float64, tasks)}
	for i := range g.Scores {
		g.Scores[i] = rapid.SliceOfN(rapid.Map(rapid.Float64Range(-5, 5), func(x float64) float64 {
			return math.Round(x*4) / 4
		}), 0, 12).Draw(t, label+"scores")
	}
	if g.N() == 0 {
		g.Scores[0] = []float64{rapid.Float64Range(-5, 5).Draw(t, label+"one")}
	}
	return g
}

func bounds(g Group) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, xs := range g.Scores {
		for _, x := range xs {
			lo, hi = min(lo, x), max(hi, x)
		}
	}
	return lo, hi
}

func TestCompareProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		gs := []Group{genGroup(t, "a"), genGroup(t, "b")}
		taus := rapid.SliceOfN(rapid.Float64Range(-6, 6), 0, 8).Draw(t, "taus")
		o := Options{Reps: rapid.IntRange(1, 300).Draw(t, "reps"), CI: rapid.Float64Range(0.5, 0.99).Draw(t, "ci"),
			Seed: rapid.Uint64().Draw(t, "seed"), Gamma: 1}
		req := Request{Groups: gs, Stats: Stats, Taus: taus, Improve: [][2]int{{0, 1}, {1, 0}}, Options: o}
		res, err := Compare(req)
		if _, noCommon := ProbImprovement(gs[0].Scores, gs[1].Scores); noCommon != nil {
			if err == nil {
				t.Fatal("no task in common, no error")
			}
			req.Improve = nil
			res, err = Compare(req)
		}
		if err != nil {
			t.Fatal(err)
		}
		for gi, gr := range res.Groups {
			lo, hi := bounds(gs[gi])
			for st, iv := range gr.Stats {
				if !(iv.Lo <= iv.Hi) {
					t.Fatalf("group %d %s: lo %v > hi %v", gi, st, iv.Lo, iv.Hi)
				}
				if st != StatGap && (iv.Lo < lo-1e-9 || iv.Hi > hi+1e-9 || iv.Value < lo-1e-9 || iv.Value > hi+1e-9) {
					t.Fatalf("group %d %s: %+v outside the data's [%v, %v]", gi, st, iv, lo, hi)
				}
			}
			// The profile does not grow with tau.
			ps := slices.Clone(gr.Profile)
			slices.SortFunc(ps, func(a, b ProfilePoint) int {
				return map[bool]int{true: -1, false: 1}[a.Tau < b.Tau]
			})
			for i := 1; i < len(ps); i++ {
				if ps[i].Tau > ps[i-1].Tau && (ps[i].Value > ps[i-1].Value || ps[i].Lo > ps[i-1].Lo || ps[i].Hi > ps[i-1].Hi) {
					t.Fatalf("group %d: profile grows from %+v to %+v", gi, ps[i-1], ps[i])
				}
			}
			for _, p := range ps {
				if p.Lo > p.Hi || p.Lo < 0 || p.Hi > 1 {
					t.Fatalf("group %d: profile point %+v", gi, p)
				}
			}
		}
		if len(res.Improvements) == 2 {
			a, b := res.Improvements[0], res.Improvements[1]
			if math.Abs(a.Value+b.Value-1) > 1e-12 {
				t.Fatalf("P(a>b) %v + P(b>a) %v != 1", a.Value, b.Value)
			}
			for _, iv := range []Improvement{a, b} {
				if iv.Lo > iv.Hi || iv.Lo < 0 || iv.Hi > 1 {
					t.Fatalf("improvement %+v", iv)
				}
			}
		}
		// The same seed, the same answer.
		again, err := Compare(req)
		if err != nil || !equalResults(res, again) {
			t.Fatal("the same seed gave another answer")
		}
	})
}

func equalResults(a, b Result) bool {
	if len(a.Groups) != len(b.Groups) || !slices.Equal(a.Improvements, b.Improvements) {
		return false
	}
	for i := range a.Groups {
		x, y := a.Groups[i], b.Groups[i]
		if x.N != y.N || !slices.Equal(x.Profile, y.Profile) || len(x.Stats) != len(y.Stats) {
			return false
		}
		for k, v := range x.Stats {
			if y.Stats[k] != v {
				return false
			}
		}
	}
	return true
}

// The point estimates do not depend on the order of a task's runs, nor on
// the order of the tasks.
func TestPermutationInvariance(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := genGroup(t, "g")
		p := Group{Scores: make([][]float64, len(g.Scores))}
		for i, xs := range g.Scores {
			p.Scores[i] = rapid.Permutation(xs).Draw(t, "runs")
		}
		p.Scores = rapid.Permutation(p.Scores).Draw(t, "tasks")
		for _, st := range Stats {
			if a, b := Estimate(st, g.Scores, 1), Estimate(st, p.Scores, 1); !near(a, b, 1e-12) {
				t.Fatalf("%s: %v, permuted %v", st, a, b)
			}
		}
		tau := rapid.Float64Range(-5, 5).Draw(t, "tau")
		if a, b := Profile(g.Scores, tau), Profile(p.Scores, tau); a != b {
			t.Fatalf("profile: %v, permuted %v", a, b)
		}
	})
}

// A replicate that draws every run once is the point estimate: the
// counting bootstrap computes what the textbook does.
func TestBootMatchesEstimate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := genGroup(t, "g")
		taus := rapid.SliceOfN(rapid.Float64Range(-6, 6), 1, 5).Draw(t, "taus")
		slices.Sort(taus)
		var b boot
		b.reset(g, 1, taus)
		b.gapSum = 0
		for t, pos := range b.pos {
			s := 0.0
			for _, i := range pos {
				b.counts[i]++
				s += b.vals[i]
				b.gapSum += b.clip[i]
			}
			b.means[t] = s / float64(len(pos))
		}
		for _, st := range Stats {
			if a, e := b.stat(st, 1), Estimate(st, g.Scores, 1); !near(a, e, 1e-12) {
				t.Fatalf("%s: bootstrap %v, textbook %v", st, a, e)
			}
		}
		b.profile()
		for j, tau := range taus {
			k := slices.Index(b.hist[j*(b.n+1):(j+1)*(b.n+1)], 1)
			if got, want := float64(k)/float64(b.n), Profile(g.Scores, tau); got != want {
				t.Fatalf("profile at %v: bootstrap %v, textbook %v", tau, got, want)
			}
		}
	})
}

func TestCurveProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		points := rapid.IntRange(1, 20).Draw(t, "points")
		ng := rapid.IntRange(1, 3).Draw(t, "groups")
		groups := make([]CurveGroup, ng)
		for gi := range groups {
			g := genGroup(t, "g")
			groups[gi].Series = make([][][]float64, len(g.Scores))
			for ti, xs := range g.Scores {
				for range xs {
					groups[gi].Series[ti] = append(groups[gi].Series[ti],
						rapid.SliceOfN(rapid.Float64Range(-5, 5), points, points).Draw(t, "series"))
				}
			}
		}
		grid := make([]float64, points)
		for i := range grid {
			grid[i] = float64(i * 10)
		}
		o := Options{Reps: rapid.IntRange(1, 200).Draw(t, "reps"), CI: 0.95, Seed: rapid.Uint64().Draw(t, "seed")}
		cs, err := Curves(groups, grid, o)
		if err != nil {
			t.Fatal(err)
		}
		for gi, c := range cs {
			for f, p := range c {
				var at [][]float64
				lo, hi := math.Inf(1), math.Inf(-1)
				for _, ss := range groups[gi].Series {
					var xs []float64
					for _, s := range ss {
						xs = append(xs, s[f])
						lo, hi = min(lo, s[f]), max(hi, s[f])
					}
					at = append(at, xs)
				}
				if want := IQM(at); !near(p.Value, want, 1e-12) || p.Step != grid[f] {
					t.Fatalf("group %d step %d: %+v, IQM %v", gi, f, p, want)
				}
				if p.Lo > p.Hi || p.Lo < lo-1e-9 || p.Hi > hi+1e-9 {
					t.Fatalf("group %d step %d: %+v outside [%v, %v]", gi, f, p, lo, hi)
				}
			}
		}
		again, _ := Curves(groups, grid, o)
		for gi := range cs {
			if !slices.Equal(cs[gi], again[gi]) {
				t.Fatal("the same seed gave other curves")
			}
		}
	})
}

func TestSelectK(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		xs := rapid.SliceOfN(rapid.Map(rapid.IntRange(-3, 3), func(i int) float64 { return float64(i) }), 1, 200).Draw(t, "xs")
		k := rapid.IntRange(0, len(xs)-1).Draw(t, "k")
		sorted := slices.Clone(xs)
		slices.Sort(sorted)
		if got := selectK(xs, k); got != sorted[k] || xs[k] != sorted[k] {
			t.Fatalf("selectK %d = %v, want %v", k, got, sorted[k])
		}
		for i := range xs {
			if (i < k && xs[i] > xs[k]) || (i > k && xs[i] < xs[k]) {
				t.Fatalf("not partitioned around %d: %v", k, xs)
			}
		}
	})
}

// percentile is numpy's linear percentile of the sorted values, whichever
// way it finds the order statistics (a tail's heap or a selection).
func TestPercentileProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		xs := rapid.SliceOfN(rapid.Map(rapid.IntRange(-20, 20), func(i int) float64 { return float64(i) / 4 }), 1, 400).Draw(t, "xs")
		q := rapid.Float64Range(0, 1).Draw(t, "q")
		sorted := slices.Clone(xs)
		slices.Sort(sorted)
		h := float64(len(xs)-1) * q
		i := int(math.Floor(h))
		want := sorted[i]
		if i+1 < len(xs) {
			want = lerp(sorted[i], sorted[i+1], h-float64(i))
		}
		if got := percentile(xs, q, new([]float64)); !near(got, want, 1e-12) {
			t.Fatalf("percentile %v of %d = %v, want %v", q, len(xs), got, want)
		}
	})
}

// Curves over more steps than a block replay the same replicates in every
// block: each step's interval is that of the textbook bootstrap drawing
// the same runs from the same stream, materialised and sorted.
func TestCurvesBlocksReplay(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		points := rapid.IntRange(frameBlock+1, 3*frameBlock+5).Draw(t, "points")
		tasks := rapid.IntRange(1, 3).Draw(t, "tasks")
		var g CurveGroup
		for range tasks {
			runs := rapid.IntRange(1, 6).Draw(t, "runs")
			var ss [][]float64
			for range runs {
				ss = append(ss, rapid.SliceOfN(rapid.Float64Range(-5, 5), points, points).Draw(t, "series"))
			}
			g.Series = append(g.Series, ss)
		}
		grid := make([]float64, points)
		for i := range grid {
			grid[i] = float64(i)
		}
		o := Options{Reps: rapid.IntRange(2, 60).Draw(t, "reps"), CI: 0.9, Seed: rapid.Uint64().Draw(t, "seed")}
		cs, err := Curves([]CurveGroup{g}, grid, o)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(o.Seed, 0))
		est := make([][]float64, points)
		for range o.Reps {
			var drawn [][]float64
			for _, ss := range g.Series {
				for range ss {
					drawn = append(drawn, ss[rng.Uint32N(uint32(len(ss)))])
				}
			}
			for f := range points {
				var at []float64
				for _, s := range drawn {
					at = append(at, s[f])
				}
				est[f] = append(est[f], IQM([][]float64{at}))
			}
		}
		// Replayed from the stream in each block, not kept: the same curve.
		var c curveBoot
		if replayed := c.curve(g, 0, grid, o, 0); !slices.Equal(replayed, cs[0]) {
			t.Fatalf("replayed replicates:\n%v\nkept:\n%v", replayed, cs[0])
		}
		for f, p := range cs[0] {
			lo, hi := percentile(est[f], 0.05, new([]float64)), percentile(est[f], 0.95, new([]float64))
			if !near(p.Lo, lo, 1e-9) || !near(p.Hi, hi, 1e-9) {
				t.Fatalf("step %d of %d: [%v, %v], textbook [%v, %v]", f, points, p.Lo, p.Hi, lo, hi)
			}
		}
	})
}

// Compare's counting bootstrap is the textbook one: each interval equals
// that of the same replicates (the same draws from the same stream)
// materialised and estimated as the point estimates are.
func TestCompareReplay(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := genGroup(t, "g")
		taus := rapid.SliceOfN(rapid.Float64Range(-6, 6), 0, 4).Draw(t, "taus")
		o := Options{Reps: rapid.IntRange(2, 100).Draw(t, "reps"), CI: 0.9, Seed: rapid.Uint64().Draw(t, "seed"), Gamma: 0.5}
		res, err := Compare(Request{Groups: []Group{g}, Stats: Stats, Taus: taus, Options: o})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(o.Seed, 0))
		est := map[Stat][]float64{}
		prof := make([][]float64, len(taus))
		for range o.Reps {
			var re [][]float64
			for _, xs := range g.Scores {
				if len(xs) == 0 {
					continue
				}
				var r []float64
				for range xs {
					r = append(r, xs[rng.Uint32N(uint32(len(xs)))])
				}
				re = append(re, r)
			}
			for _, st := range Stats {
				est[st] = append(est[st], Estimate(st, re, o.Gamma))
			}
			for j, tau := range taus {
				prof[j] = append(prof[j], Profile(re, tau))
			}
		}
		check := func(what string, iv Interval, e []float64) {
			lo, hi := percentile(e, 0.05, new([]float64)), percentile(e, 0.95, new([]float64))
			if !near(iv.Lo, lo, 1e-9) || !near(iv.Hi, hi, 1e-9) {
				t.Fatalf("%s: [%v, %v], textbook [%v, %v]", what, iv.Lo, iv.Hi, lo, hi)
			}
		}
		for _, st := range Stats {
			check(string(st), res.Groups[0].Stats[st], est[st])
		}
		for j, p := range res.Groups[0].Profile {
			check("profile", p.Interval, prof[j])
		}
	})
}

// The improvement's bootstrap is the textbook one too: x's and y's runs
// drawn independently within each shared task, P(X > Y) of the replicate.
func TestImprovementReplay(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		x, y := genGroup(t, "x"), genGroup(t, "y")
		if _, err := ProbImprovement(x.Scores, y.Scores); err != nil {
			t.Skip("no task in common")
		}
		o := Options{Reps: rapid.IntRange(2, 100).Draw(t, "reps"), CI: 0.8, Seed: rapid.Uint64().Draw(t, "seed"), Gamma: 1}
		res, err := Compare(Request{Groups: []Group{x, y}, Improve: [][2]int{{0, 1}}, Options: o})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(o.Seed, improveStream))
		var est []float64
		draw := func(xs []float64) []float64 {
			var r []float64
			for range xs {
				r = append(r, xs[rng.Uint32N(uint32(len(xs)))])
			}
			return r
		}
		for range o.Reps {
			var rx, ry [][]float64
			for t := range min(len(x.Scores), len(y.Scores)) {
				if len(x.Scores[t]) > 0 && len(y.Scores[t]) > 0 {
					rx, ry = append(rx, draw(x.Scores[t])), append(ry, draw(y.Scores[t]))
				}
			}
			p, _ := ProbImprovement(rx, ry)
			est = append(est, p)
		}
		iv := res.Improvements[0]
		lo, hi := percentile(est, 0.1, new([]float64)), percentile(est, 0.9, new([]float64))
		if !near(iv.Lo, lo, 1e-9) || !near(iv.Hi, hi, 1e-9) {
			t.Fatalf("[%v, %v], textbook [%v, %v]", iv.Lo, iv.Hi, lo, hi)
		}
		// The reverse's interval is that of the same replicates' 1 - P.
		rev := iv.Reverse()
		for i := range est {
			est[i] = 1 - est[i]
		}
		lo, hi = percentile(est, 0.1, new([]float64)), percentile(est, 0.9, new([]float64))
		if rev.A != 1 || rev.B != 0 || !near(rev.Lo, lo, 1e-9) || !near(rev.Hi, hi, 1e-9) || !near(rev.Value+iv.Value, 1, 1e-12) {
			t.Fatalf("reverse %+v, textbook [%v, %v]", rev, lo, hi)
		}
	})
}

// interval's ends are percentile's, whichever way it finds them.
func TestIntervalProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 5000).Draw(t, "n")
		ties := rapid.Bool().Draw(t, "ties")
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = rapid.Float64Range(-10, 10).Draw(t, "x")
			if ties {
				xs[i] = math.Round(xs[i])
			}
		}
		ci := rapid.Float64Range(0.5, 0.999).Draw(t, "ci")
		qlo, qhi := (1-ci)/2, (1+ci)/2
		wantLo, wantHi := percentile(slices.Clone(xs), qlo, new([]float64)), percentile(slices.Clone(xs), qhi, new([]float64))
		lo, hi := interval(xs, qlo, qhi, new([]float64))
		if !near(lo, wantLo, 1e-12) || !near(hi, wantHi, 1e-12) {
			t.Fatalf("interval %v of %d: [%v, %v], percentile [%v, %v]", ci, n, lo, hi, wantLo, wantHi)
		}
	})
}
