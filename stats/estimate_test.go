package stats

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func near(a, b, tol float64) bool {
	return a == b || math.Abs(a-b) <= tol*max(1, math.Abs(a), math.Abs(b))
}

func TestEstimates(t *testing.T) {
	f := func(name string, scores [][]float64, iqm, mean, median, gap float64) {
		t.Helper()
		for _, c := range []struct {
			st   Stat
			want float64
		}{{StatIQM, iqm}, {StatMean, mean}, {StatMedian, median}, {StatGap, gap}} {
			if got := Estimate(c.st, scores, 1); !near(got, c.want, 1e-12) {
				t.Errorf("%s: %s = %v, want %v", name, c.st, got, c.want)
			}
		}
	}
	f("one run", [][]float64{{0.5}}, 0.5, 0.5, 0.5, 0.5)
	f("two runs, no trim", [][]float64{{0, 1}}, 0.5, 0.5, 0.5, 0.5)
	f("three runs, no trim", [][]float64{{0, 1, 5}}, 2, 2, 2, 1-(0+1+1)/3.0)
	// 4 runs: one cut from each end.
	f("four runs", [][]float64{{10, 0, 2, 1}}, 1.5, 3.25, 3.25, 1-(1+0+1+1)/4.0)
	// 8 pooled: two cut from each end; mean of task means 2 and 20.
	f("two tasks", [][]float64{{1, 2, 3}, {0, 10, 30, 40, 20}}, (2+3+10+20)/4.0, 11, 11, 1-(1+1+1+0+1+1+1+1)/8.0)
	f("ties", [][]float64{{1, 1, 1, 1, 1}}, 1, 1, 1, 0)
	f("three tasks", [][]float64{{1}, {5}, {3}}, 3, 3, 3, 0)
	f("an empty task", [][]float64{{1}, {}, {3}}, 2, 2, 2, 0)
}

func TestProfile(t *testing.T) {
	s := [][]float64{{1, 2, 3}, {4}}
	for _, c := range []struct{ tau, want float64 }{{0, 1}, {1, 0.75}, {2.5, 0.5}, {4, 0}} {
		if got := Profile(s, c.tau); got != c.want {
			t.Errorf("profile at %v = %v, want %v", c.tau, got, c.want)
		}
	}
}

func TestProbImprovement(t *testing.T) {
	f := func(x, y [][]float64, want float64) {
		t.Helper()
		got, err := ProbImprovement(x, y)
		if err != nil || !near(got, want, 1e-12) {
			t.Errorf("P(%v > %v) = %v, %v; want %v", x, y, got, err, want)
		}
	}
	f([][]float64{{2}}, [][]float64{{1}}, 1)
	f([][]float64{{1}}, [][]float64{{1}}, 0.5)
	f([][]float64{{1, 2}}, [][]float64{{1, 2}}, 0.5)
	f([][]float64{{1, 3}}, [][]float64{{2}}, 0.5)
	// Task 1 only in x: left out.
	f([][]float64{{3}, {0}}, [][]float64{{1}}, 1)
	f([][]float64{{3}, {0}}, [][]float64{{1}, {1}}, 0.5)
	if _, err := ProbImprovement([][]float64{{1}}, [][]float64{{}, {1}}); err == nil {
		t.Error("no task in common: no error")
	}
}

func TestScore(t *testing.T) {
	pts := [][2]float64{{0, 1}, {1, 2}, {2, 4}}
	f := func(window int, want float64, wantOK bool) {
		t.Helper()
		if got, ok := Score(pts, window); ok != wantOK || (ok && got != want) {
			t.Errorf("Score(window %d) = %v, %v; want %v, %v", window, got, ok, want, wantOK)
		}
	}
	f(0, 4, true)
	f(1, 4, true)
	f(2, 3, true)
	f(100, 7/3.0, true)
	if _, ok := Score(nil, 1); ok {
		t.Error("an empty series has a score")
	}
	if _, ok := Score([][2]float64{{0, math.NaN()}}, 1); ok {
		t.Error("a NaN is a score")
	}
	if _, ok := Score([][2]float64{{0, math.Inf(1)}, {1, 0}}, 2); ok {
		t.Error("a window with +Inf is a score")
	}
}

func TestDropNonFinite(t *testing.T) {
	g := Group{Scores: [][]float64{{1, math.NaN(), 2}, {math.Inf(-1)}, {3}}}
	if n := DropNonFinite(&g); n != 2 || g.N() != 3 || len(g.Scores[1]) != 0 {
		t.Fatalf("dropped %d, left %v", n, g.Scores)
	}
}

func TestNormalize(t *testing.T) {
	gs := []Group{{Scores: [][]float64{{0, 10}, {5}}}, {Scores: [][]float64{{5}, {15}}}}
	if err := Normalize(gs, []Span{{0, 10}, {5, 15}}); err != nil {
		t.Fatal(err)
	}
	if s := gs[0].Scores; s[0][0] != 0 || s[0][1] != 1 || s[1][0] != 0 || gs[1].Scores[1][0] != 1 {
		t.Fatalf("normalised: %v %v", gs[0].Scores, gs[1].Scores)
	}
	if err := Normalize(gs, []Span{{1, 1}}); err == nil || !strings.Contains(err.Error(), "task 0") {
		t.Fatalf("an empty span: %v", err)
	}
	// The baseline's mean maps to 1, the lowest score to 0.
	gs = []Group{{Scores: [][]float64{{-10, -20}}}, {Scores: [][]float64{{-40}}}}
	sp, err := BaselineSpans(gs, 0, math.NaN())
	if err != nil || sp[0] != (Span{-40, -15}) {
		t.Fatalf("baseline spans %v, %v", sp, err)
	}
	if _, err := BaselineSpans([]Group{{Scores: [][]float64{{1}}}, {Scores: [][]float64{{}, {2}}}}, 0, 0); err == nil ||
		!strings.Contains(err.Error(), "task 1") {
		t.Fatalf("a baseline without a task: %v", err)
	}
}

func TestPercentile(t *testing.T) {
	// numpy.percentile([1, 2, 3, 4], [2.5, 50, 97.5]) = 1.075, 2.5, 3.925.
	for _, c := range []struct{ q, want float64 }{{0.025, 1.075}, {0.5, 2.5}, {0.975, 3.925}, {0, 1}, {1, 4}} {
		if got := percentile([]float64{4, 3, 1, 2}, c.q, new([]float64)); !near(got, c.want, 1e-12) {
			t.Errorf("percentile %v = %v, want %v", c.q, got, c.want)
		}
	}
	xs := make([]float64, 1000)
	for i := range xs {
		xs[i] = float64((i * 7919) % 1000)
	}
	if got := percentile(xs, 0.975, new([]float64)); !near(got, 974.025, 1e-12) {
		t.Errorf("percentile of 0..999 at 97.5%% = %v", got)
	}
	for _, q := range []float64{0, 0.001, 0.025, 0.1, 0.5, 0.9, 0.975, 0.999, 1} {
		if got, want := percentile(slices.Clone(xs), q, new([]float64)), float64(999)*q; !near(got, want, 1e-12) {
			t.Errorf("percentile of 0..999 at %v = %v, want %v", q, got, want)
		}
	}
	// interval's one pass over the tails (n ≥ 512) gives percentile's ends,
	// with ties too.
	for _, tie := range []int{1, 7} {
		ys := make([]float64, 2000)
		for i := range ys {
			ys[i] = float64((i * 7919) % 2000 / tie)
		}
		for _, ci := range []float64{0.95, 0.99, 0.9} {
			lo, hi := interval(slices.Clone(ys), (1-ci)/2, (1+ci)/2, new([]float64))
			wlo, whi := percentile(slices.Clone(ys), (1-ci)/2, new([]float64)), percentile(slices.Clone(ys), (1+ci)/2, new([]float64))
			if !near(lo, wlo, 1e-12) || !near(hi, whi, 1e-12) {
				t.Errorf("interval %v (ties of %d): [%v, %v], percentile [%v, %v]", ci, tie, lo, hi, wlo, whi)
			}
		}
	}
	// histPercentile agrees with percentile over the same values.
	hist := []int32{3, 0, 5, 2} // values 0, 2/3 ×5, 1 ×2 of n = 3
	vals := []float64{0, 0, 0, 2. / 3, 2. / 3, 2. / 3, 2. / 3, 2. / 3, 1, 1}
	for _, q := range []float64{0.025, 0.3, 0.5, 0.975} {
		if a, b := histPercentile(hist, 3, q), percentile(append([]float64(nil), vals...), q, new([]float64)); !near(a, b, 1e-12) {
			t.Errorf("at %v: histogram %v, values %v", q, a, b)
		}
	}
}

func TestCompareBounds(t *testing.T) {
	one := []Group{{Scores: [][]float64{{1, 2}}}}
	f := func(r Request, want string) {
		t.Helper()
		if _, err := Compare(r); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error naming %q", err, want)
		}
	}
	o := DefaultOptions()
	f(Request{Options: o}, "no group")
	f(Request{Groups: one, Options: Options{Reps: 10_000_000, CI: 0.95}}, "reps")
	f(Request{Groups: one, Options: Options{Reps: 0, CI: 0.95}}, "reps")
	f(Request{Groups: one, Options: Options{Reps: 10, CI: 1}}, "ci")
	f(Request{Groups: make([]Group, 10_000), Options: o}, "groups")
	f(Request{Groups: one, Taus: make([]float64, 1001), Options: o}, "profile points")
	f(Request{Groups: one, Taus: []float64{math.NaN()}, Options: o}, "finite")
	f(Request{Groups: []Group{{Scores: [][]float64{{math.NaN()}}}}, Options: o}, "leave such runs out")
	f(Request{Groups: []Group{{}}, Options: o}, "no score")
	f(Request{Groups: one, Stats: []Stat{"max"}, Options: o}, "stat")
	f(Request{Groups: []Group{{Scores: [][]float64{make([]float64, 100_000)}}}, Options: Options{Reps: 50_000, CI: 0.9}}, "reps × scores")
	f(Request{Groups: []Group{{Scores: [][]float64{{1}}}, {Scores: [][]float64{{}, {1}}}}, Improve: [][2]int{{0, 1}}, Options: o}, "no task in common")
}

func TestCompareDegenerate(t *testing.T) {
	// One run: every replicate is the run; the interval is the point.
	r, err := Compare(Request{Groups: []Group{{Scores: [][]float64{{3}}}}, Stats: Stats, Taus: []float64{3, 2},
		Options: DefaultOptions()})
	if err != nil {
		t.Fatal(err)
	}
	for st, iv := range r.Groups[0].Stats {
		want := 3.0
		if st == StatGap {
			want = 0
		}
		if iv != (Interval{want, want, want}) {
			t.Errorf("%s: %+v", st, iv)
		}
	}
	if p := r.Groups[0].Profile; len(p) != 2 || p[0] != (ProfilePoint{3, Interval{0, 0, 0}}) || p[1] != (ProfilePoint{2, Interval{1, 1, 1}}) {
		t.Errorf("profile %+v", p)
	}
}

func TestGridAlign(t *testing.T) {
	s := [][][2]float64{{{0, 1}, {10, 2}}, {{5, 7}, {20, 8}}, {}}
	g := Grid(s, 4)
	if len(g) != 4 || g[0] != 5 || g[3] != 20 || g[1] != 10 {
		t.Fatalf("grid %v", g)
	}
	a, ok := Align(s[0], g, nil)
	if !ok || len(a) != 4 || a[0] != 1 || a[1] != 2 || a[3] != 2 {
		t.Fatalf("aligned %v %v", a, ok)
	}
	if _, ok := Align([][2]float64{{6, 1}}, g, nil); ok {
		t.Fatal("a series that starts after the grid aligned")
	}
	if Grid([][][2]float64{{}}, 10) != nil {
		t.Fatal("a grid of nothing")
	}
	if g := Grid([][][2]float64{{{3, 1}}}, 10); len(g) != 1 || g[0] != 3 {
		t.Fatalf("a grid of one step: %v", g)
	}
}
