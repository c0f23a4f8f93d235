package stats

import (
	"math/rand/v2"
	"testing"
)

// BenchGroups are groups × tasks × seeds of normal scores, the issue's
// figure: 100 groups × 5 tasks × 10 seeds.
func benchGroups(groups, tasks, seeds int) []Group {
	rng := rand.New(rand.NewPCG(1, 2))
	gs := make([]Group, groups)
	for gi := range gs {
		gs[gi].Scores = make([][]float64, tasks)
		for t := range tasks {
			for range seeds {
				gs[gi].Scores[t] = append(gs[gi].Scores[t], rng.NormFloat64()+float64(gi)/float64(groups))
			}
		}
	}
	return gs
}

// BenchmarkCompareIQM is the target: IQM with 95% intervals at
// 2,000 stratified reps for 100 groups × 10 seeds × 5 tasks in ≤ 300 ms.
func BenchmarkCompareIQM(b *testing.B) {
	req := Request{Groups: benchGroups(100, 5, 10), Stats: []Stat{StatIQM}, Options: DefaultOptions()}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compare(req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompareAll adds every aggregate, a 50-point profile and an
// improvement.
func BenchmarkCompareAll(b *testing.B) {
	taus := make([]float64, 50)
	for i := range taus {
		taus[i] = -2 + 4*float64(i)/49
	}
	req := Request{Groups: benchGroups(100, 5, 10), Stats: Stats, Taus: taus, Improve: [][2]int{{0, 1}},
		Options: DefaultOptions()}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compare(req); err != nil {
			b.Fatal(err)
		}
	}
}

func benchCurves(groups, seeds, points int) []CurveGroup {
	rng := rand.New(rand.NewPCG(3, 4))
	cs := make([]CurveGroup, groups)
	for gi := range cs {
		var runs [][]float64
		for range seeds {
			s := make([]float64, points)
			v := 0.0
			for i := range s {
				v += rng.NormFloat64() * 0.1
				s[i] = v
			}
			runs = append(runs, s)
		}
		cs[gi].Series = [][][]float64{runs}
	}
	return cs
}

// BenchmarkCurves is the target: IQM-over-steps curves with 95%
// intervals at 2,000 reps for 20 groups × 10 seeds × 1,000 points in ≤ 500 ms.
func BenchmarkCurves(b *testing.B) {
	cs := benchCurves(20, 10, 1000)
	grid := make([]float64, 1000)
	for i := range grid {
		grid[i] = float64(i)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Curves(cs, grid, DefaultOptions()); err != nil {
			b.Fatal(err)
		}
	}
}
