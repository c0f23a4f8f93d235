package stats

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

type refCase struct {
	Groups  [][][]string   `json:"groups"` // scores as strings: NaN and Inf travel
	Taus    []float64      `json:"taus"`
	Gamma   float64        `json:"gamma"`
	Improve [][2]int       `json:"improve"`
	Reps    int            `json:"reps"`
	CI      float64        `json:"ci"`
	Seed    int            `json:"seed"`
	Curves  [][][][][2]any `json:"curves,omitempty"` // group, task, run: [step, value as a string]
	Grid    []float64      `json:"grid,omitempty"`
}

type refInterval struct {
	Value float64       `json:"value"`
	CI    [2]float64    `json:"ci"`
	Band  [2][2]float64 `json:"band"` // where each end may be (reference.py)
}

type refAnswer struct {
	Skipped []int `json:"skipped"`
	Groups  []struct {
		Stats   map[string]refInterval `json:"stats"`
		Profile []refInterval          `json:"profile"`
	} `json:"groups"`
	Improve []refInterval   `json:"improve"`
	Curves  [][]refInterval `json:"curves"`
}

func fmtScore(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// TestAgainstNumpy holds the estimators to a textbook implementation in
// numpy (testdata/reference.py): point estimates within 1e-9, intervals
// within Monte-Carlo error (both bootstraps at 20,000 reps, with their own
// random numbers), over ties, a group of one run, groups of very different
// sizes, unequal tasks and NaN and Inf scores (skipped, counted).
func TestAgainstNumpy(t *testing.T) {
	py := testutil.NumpyPython(t)
	const reps = 20_000
	rng := rand.New(rand.NewPCG(7, 7))
	var cases []refCase
	var goGroups [][]Group
	for ci := range 6 {
		ngroups := 2 + ci%3
		c := refCase{Gamma: 0.5, Reps: reps, CI: []float64{0.95, 0.9, 0.5}[ci%3], Seed: ci,
			Taus: []float64{-0.5, 0, 0.25, 0.5, 1}}
		var gs []Group
		for gi := range ngroups {
			tasks := 1 + (ci+gi)%3
			var g Group
			var sg [][]string
			for ti := range tasks {
				n := 1 + rng.IntN(12)
				if gi == 0 && ci == 1 {
					n = 1 // a group of one run (in one task or several)
				}
				if gi == 1 && ci == 2 {
					n = 60 // far larger than the others
				}
				var xs []float64
				var ss []string
				for range n {
					x := rng.NormFloat64()*0.5 + float64(gi)*0.2 + float64(ti)*0.1
					if ci%2 == 0 {
						x = math.Round(x*4) / 4 // ties
					}
					switch rng.IntN(15) {
					case 0:
						x = math.NaN()
					case 1:
						x = math.Inf(1 - 2*rng.IntN(2))
					}
					xs = append(xs, x)
					ss = append(ss, fmtScore(x))
				}
				if gi == 0 && ci == 1 {
					xs, ss = []float64{0.3}, []string{"0.3"}
				}
				g.Scores = append(g.Scores, xs)
				sg = append(sg, ss)
			}
			gs = append(gs, g)
			c.Groups = append(c.Groups, sg)
		}
		c.Improve = [][2]int{{0, 1}, {1, 0}}
		if ci == 0 {
			// Curves: 3 groups × 2 tasks × 4 runs, series of different lengths
			// and steps, with NaNs.
			for range 3 {
				var g [][][][2]any
				for range 2 {
					var task [][][2]any
					for range 4 {
						var s [][2]any
						step := float64(rng.IntN(5))
						for range 20 + rng.IntN(30) {
							v := rng.NormFloat64()
							if rng.IntN(20) == 0 {
								v = math.NaN()
							}
							s = append(s, [2]any{step, fmtScore(v)})
							step += float64(1 + rng.IntN(4))
						}
						task = append(task, s)
					}
					g = append(g, task)
				}
				c.Curves = append(c.Curves, g)
			}
		}
		cases = append(cases, c)
		goGroups = append(goGroups, gs)
	}
	// The curves' series as Go reads them, and their grid.
	curveSeries := func(c refCase) [][][][2]float64 {
		var out [][][][2]float64
		for _, g := range c.Curves {
			var gg [][][2]float64
			for _, task := range g {
				for _, s := range task {
					var ps [][2]float64
					for _, p := range s {
						v, _ := strconv.ParseFloat(p[1].(string), 64)
						ps = append(ps, [2]float64{p[0].(float64), v})
					}
					gg = append(gg, ps)
				}
			}
			out = append(out, gg)
		}
		return out
	}
	var flat [][][2]float64
	for _, g := range curveSeries(cases[0]) {
		for _, s := range g {
			kept, _ := FinitePoints(s)
			flat = append(flat, kept)
		}
	}
	cases[0].Grid = Grid(flat, 25)

	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "testdata/reference.py")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference.py: %v\n%s", err, stderr.Bytes())
	}
	var answers []refAnswer
	if err := json.Unmarshal(out, &answers); err != nil {
		t.Fatalf("reference.py's answer: %v", err)
	}

	point := func(what string, got, want float64) {
		t.Helper()
		if !near(got, want, 1e-9) {
			t.Errorf("%s: %.17g, numpy %.17g", what, got, want)
		}
	}
	// Monte-Carlo error, in probability: each end of the interval lies
	// between numpy's percentiles five standard errors either side of it,
	// which holds for the lumpy distributions of a bootstrap of few runs
	// too.
	interval := func(what string, lo, hi float64, want refInterval) {
		t.Helper()
		in := func(x float64, b [2]float64) bool { return x >= b[0]-1e-9 && x <= b[1]+1e-9 }
		if !in(lo, want.Band[0]) || !in(hi, want.Band[1]) {
			t.Errorf("%s: [%.6g, %.6g], numpy [%.6g, %.6g] (bands %.6g)", what, lo, hi, want.CI[0], want.CI[1], want.Band)
		}
	}
	for ci, c := range cases {
		a := answers[ci]
		gs := goGroups[ci]
		for gi := range gs {
			if n := DropNonFinite(&gs[gi]); n != a.Skipped[gi] {
				t.Errorf("case %d group %d: skipped %d, numpy %d", ci, gi, n, a.Skipped[gi])
			}
		}
		res, err := Compare(Request{Groups: gs, Stats: Stats, Taus: c.Taus, Improve: c.Improve,
			Options: Options{Reps: reps, CI: c.CI, Seed: uint64(ci), Gamma: c.Gamma}})
		if err != nil {
			t.Fatalf("case %d: %v", ci, err)
		}
		for gi, gr := range res.Groups {
			for st, iv := range gr.Stats {
				want := a.Groups[gi].Stats[string(st)]
				what := "case " + strconv.Itoa(ci) + " group " + strconv.Itoa(gi) + " " + string(st)
				point(what, iv.Value, want.Value)
				interval(what, iv.Lo, iv.Hi, want)
			}
			for j, p := range gr.Profile {
				want := a.Groups[gi].Profile[j]
				what := "case " + strconv.Itoa(ci) + " group " + strconv.Itoa(gi) + " profile at " + fmtScore(p.Tau)
				point(what, p.Value, want.Value)
				interval(what, p.Lo, p.Hi, want)
			}
		}
		for j, iv := range res.Improvements {
			what := "case " + strconv.Itoa(ci) + " improvement " + strconv.Itoa(j)
			point(what, iv.Value, a.Improve[j].Value)
			interval(what, iv.Lo, iv.Hi, a.Improve[j])
		}
		if len(c.Curves) == 0 {
			continue
		}
		var cgs []CurveGroup
		for _, g := range c.Curves {
			var cg CurveGroup
			for _, task := range g {
				var ts [][]float64
				for _, s := range task {
					var ps [][2]float64
					for _, p := range s {
						v, _ := strconv.ParseFloat(p[1].(string), 64)
						ps = append(ps, [2]float64{p[0].(float64), v})
					}
					kept, _ := FinitePoints(ps)
					al, ok := Align(kept, c.Grid, nil)
					if !ok {
						t.Fatalf("a series starts after the grid")
					}
					ts = append(ts, al)
				}
				cg.Series = append(cg.Series, ts)
			}
			cgs = append(cgs, cg)
		}
		curves, err := Curves(cgs, c.Grid, Options{Reps: reps, CI: c.CI, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		for gi, cv := range curves {
			for f, p := range cv {
				want := a.Curves[gi][f]
				what := "curve " + strconv.Itoa(gi) + " at " + fmtScore(p.Step)
				point(what, p.Value, want.Value)
				interval(what, p.Lo, p.Hi, want)
			}
		}
	}
}
