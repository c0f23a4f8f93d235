package stats

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
)

// The bounds of one comparison; crossing one is an error naming it.
const (
	MaxReps   = 50_000
	MaxGroups = 1_000
	MaxTaus   = 1_000
	MaxTasks  = 1_000
	MaxScores = 1_000_000 // scores over every group
	// MaxWork bounds reps × (scores + profile points) summed over groups,
	// and reps × the scores of the two groups of each improvement: a
	// second or two of bootstrap on one core.
	MaxWork = 400_000_000
	// MaxProfileCells bounds profile points × the scores of a group (the
	// per-point histograms of the profile's bootstrap).
	MaxProfileCells = 20_000_000
)

// Options are a bootstrap's settings.
type Options struct {
	Reps  int     // bootstrap replicates, 1..MaxReps
	CI    float64 // the interval's coverage, in (0, 1)
	Seed  uint64  // the PCG streams' seed: the same seed, the same intervals
	Gamma float64 // the optimality gap's threshold
}

// DefaultOptions are 2,000 reps, 95% intervals, seed 0 and gamma 1.
func DefaultOptions() Options { return Options{Reps: 2000, CI: 0.95, Gamma: 1} }

func (o Options) check() error {
	if o.Reps < 1 || o.Reps > MaxReps {
		return fmt.Errorf("reps must be 1..%d", MaxReps)
	}
	if !(o.CI > 0 && o.CI < 1) {
		return errors.New("ci must be in (0, 1), such as 0.95")
	}
	if !finite(o.Gamma) {
		return errors.New("gamma must be finite")
	}
	return nil
}

// quantiles are the interval's percentiles.
func (o Options) quantiles() (float64, float64) { return (1 - o.CI) / 2, (1 + o.CI) / 2 }

// Interval is a point estimate and its bootstrap percentile interval.
type Interval struct {
	Value, Lo, Hi float64
}

// ProfilePoint is a performance profile at Tau, with its interval.
type ProfilePoint struct {
	Tau float64
	Interval
}

// Request is one comparison.
type Request struct {
	Groups []Group
	Stats  []Stat    // the aggregates wanted
	Taus   []float64 // the performance profile's points (none: no profile)
	// Improve are pairs of group indexes [a, b]: the probability of
	// improvement of a over b for each.
	Improve [][2]int
	Options
}

// GroupResult is a group's part of a Result.
type GroupResult struct {
	N       int // scores, over every task
	Stats   map[Stat]Interval
	Profile []ProfilePoint // in Request.Taus' order
}

// Improvement is the probability of improvement of group A over group B.
type Improvement struct {
	A, B int
	Interval
}

// Reverse is the probability of improvement of B over A, from A's over B:
// P(Y > X) = 1 - P(X > Y) in every replicate, so the interval's ends swap
// (numpy's percentile is symmetric: of 1-x at q, 1 less x's at 1-q).
func (im Improvement) Reverse() Improvement {
	return Improvement{im.B, im.A, Interval{1 - im.Value, 1 - im.Hi, 1 - im.Lo}}
}

// Result is a comparison's answer, Groups in the request's order.
type Result struct {
	Groups       []GroupResult
	Improvements []Improvement
}

// Streams of the PCG: one per group for its aggregates and profile, one
// per improvement pair, so each answer depends only on its own data and
// the seed.
const improveStream = 1 << 63

func (r *Request) check() error {
	if err := r.Options.check(); err != nil {
		return err
	}
	switch {
	case len(r.Groups) == 0:
		return errors.New("no group to compare: the selection has no run with a score")
	case len(r.Groups) > MaxGroups:
		return fmt.Errorf("%d groups: at most %d groups", len(r.Groups), MaxGroups)
	case len(r.Taus) > MaxTaus:
		return fmt.Errorf("%d profile points: at most %d", len(r.Taus), MaxTaus)
	}
	for _, st := range r.Stats {
		if _, err := ParseStat(string(st)); err != nil {
			return err
		}
	}
	for _, tau := range r.Taus {
		if !finite(tau) {
			return errors.New("profile points must be finite")
		}
	}
	scores, work := 0, 0
	for i, g := range r.Groups {
		if len(g.Scores) > MaxTasks {
			return fmt.Errorf("%d tasks: at most %d", len(g.Scores), MaxTasks)
		}
		n := g.N()
		if n == 0 {
			return fmt.Errorf("group %d has no score", i)
		}
		for _, xs := range g.Scores {
			for _, x := range xs {
				if !finite(x) {
					return fmt.Errorf("group %d: a score is %g; leave such runs out (and count them)", i, x)
				}
			}
		}
		if len(r.Taus)*n > MaxProfileCells {
			return fmt.Errorf("profile points × a group's scores is %d: at most %d", len(r.Taus)*n, MaxProfileCells)
		}
		scores += n
		work += r.Reps * (n + len(r.Taus))
	}
	if scores > MaxScores {
		return fmt.Errorf("%d scores: at most %d", scores, MaxScores)
	}
	for _, p := range r.Improve {
		for _, i := range p {
			if i < 0 || i >= len(r.Groups) {
				return fmt.Errorf("BUG: improvement of group %d of %d", i, len(r.Groups))
			}
		}
		work += r.Reps * (r.Groups[p[0]].N() + r.Groups[p[1]].N())
	}
	if work > MaxWork {
		return fmt.Errorf("reps × scores is %d: at most %d; ask for fewer reps or runs", work, MaxWork)
	}
	return nil
}

// Compare answers r: each group's aggregates and profile with their
// intervals, and each improvement's. It is safe to call from several
// goroutines at once (it shares nothing between calls).
func Compare(r Request) (Result, error) {
	if err := r.check(); err != nil {
		return Result{}, err
	}
	taus := slices.Clone(r.Taus)
	slices.Sort(taus)
	res := Result{Groups: make([]GroupResult, len(r.Groups))}
	ws := make([]compareWorker, min(len(r.Groups), runtime.GOMAXPROCS(0)))
	eachGroup(len(r.Groups), func(w, gi int) { res.Groups[gi] = ws[w].group(&r, gi, taus) })
	for pi, p := range r.Improve {
		iv, err := improvement(r.Groups[p[0]], r.Groups[p[1]], r.Options, uint64(pi))
		if err != nil {
			return Result{}, fmt.Errorf("improvement of group %d over group %d: %w", p[0], p[1], err)
		}
		res.Improvements = append(res.Improvements, Improvement{p[0], p[1], iv})
	}
	return res, nil
}

// compareWorker is one goroutine's scratch space over the groups it does.
type compareWorker struct {
	b       boot
	est     []float64
	scratch []float64
}

// group is the result of group gi of r; taus are r.Taus sorted.
func (cw *compareWorker) group(r *Request, gi int, taus []float64) GroupResult {
	g, b := r.Groups[gi], &cw.b
	b.reset(g, r.Gamma, taus)
	est := slices.Grow(cw.est[:0], len(r.Stats)*r.Reps)[:len(r.Stats)*r.Reps]
	cw.est = est
	rng := rand.New(rand.NewPCG(r.Seed, uint64(gi)))
	for rep := range r.Reps {
		b.draw(rng)
		for si, st := range r.Stats {
			est[si*r.Reps+rep] = b.stat(st, r.Gamma)
		}
		b.profile()
	}
	qlo, qhi := r.quantiles()
	gr := GroupResult{N: b.n, Stats: make(map[Stat]Interval, len(r.Stats))}
	for si, st := range r.Stats {
		e := est[si*r.Reps : (si+1)*r.Reps]
		lo, hi := interval(e, qlo, qhi, &cw.scratch)
		gr.Stats[st] = Interval{Estimate(st, g.Scores, r.Gamma), lo, hi}
	}
	for _, tau := range r.Taus {
		j, _ := slices.BinarySearch(taus, tau)
		h := b.hist[j*(b.n+1) : (j+1)*(b.n+1)]
		gr.Profile = append(gr.Profile, ProfilePoint{tau,
			Interval{Profile(g.Scores, tau), histPercentile(h, b.n, qlo), histPercentile(h, b.n, qhi)}})
	}
	return gr
}

// boot is a group's stratified bootstrap. A replicate is kept as counts
// over the group's pooled scores sorted once, so the IQM and the profile
// of a replicate are one walk over them: no sort, no allocation per
// replicate.
type boot struct {
	vals   []float64 // the pooled scores, sorted
	pos    [][]int32 // pos[t][j]: the index in vals of run j of task t (tasks with runs)
	counts []int32   // a replicate: how often each of vals was drawn
	means  []float64 // a replicate's mean per task
	scr    []float64 // scratch for the median
	gapSum float64   // a replicate's sum of scores clipped at gamma
	clip   []float64 // vals clipped at gamma
	n      int
	// The profile: cut[j] is the index of the first of vals above
	// taus[j]; hist[j*(n+1)+k] counts the replicates with k draws above it.
	cut  []int
	hist []int32
}

func (b *boot) reset(g Group, gamma float64, taus []float64) {
	type sv struct {
		v    float64
		t, j int
	}
	var all []sv
	b.pos = b.pos[:0]
	for _, xs := range g.Scores {
		if len(xs) == 0 {
			continue
		}
		t := len(b.pos)
		b.pos = append(b.pos, make([]int32, len(xs)))
		for j, x := range xs {
			all = append(all, sv{x, t, j})
		}
	}
	slices.SortFunc(all, func(a, b sv) int { return cmp.Compare(a.v, b.v) })
	b.n = len(all)
	b.vals = slices.Grow(b.vals[:0], b.n)[:b.n]
	b.clip = slices.Grow(b.clip[:0], b.n)[:b.n]
	for i, s := range all {
		b.vals[i], b.clip[i] = s.v, min(s.v, gamma)
		b.pos[s.t][s.j] = int32(i)
	}
	b.counts = make([]int32, b.n)
	b.means = make([]float64, len(b.pos))
	b.scr = make([]float64, len(b.pos))
	b.cut = b.cut[:0]
	for _, tau := range taus {
		i, found := slices.BinarySearch(b.vals, tau)
		for found && i < b.n && b.vals[i] == tau {
			i++
		}
		b.cut = append(b.cut, i)
	}
	b.hist = make([]int32, len(taus)*(b.n+1))
}

// draw makes a replicate: each task's runs drawn with replacement, as many
// as the task has.
func (b *boot) draw(rng *rand.Rand) {
	clear(b.counts)
	b.gapSum = 0
	for t, pos := range b.pos {
		s := 0.0
		n := uint32(len(pos))
		for range n {
			i := pos[rng.Uint32N(n)]
			b.counts[i]++
			s += b.vals[i]
			b.gapSum += b.clip[i]
		}
		b.means[t] = s / float64(n)
	}
}

// stat is st of the replicate.
func (b *boot) stat(st Stat, gamma float64) float64 {
	switch st {
	case StatMean:
		return mean(b.means)
	case StatMedian:
		copy(b.scr, b.means)
		insertion(b.scr)
		return median(b.scr)
	case StatIQM:
		k := int32(trimmed(b.n))
		lo, hi := k, int32(b.n)-k
		seen, s := int32(0), 0.0
		for i, c := range b.counts {
			if c == 0 {
				continue
			}
			if a, z := max(seen, lo), min(seen+c, hi); z > a {
				s += b.vals[i] * float64(z-a)
			}
			if seen += c; seen >= hi {
				break
			}
		}
		return s / float64(hi-lo)
	case StatGap:
		return gamma - b.gapSum/float64(b.n)
	}
	panic("BUG: unknown stat " + string(st))
}

// profile adds the replicate to the profile's histograms.
func (b *boot) profile() {
	if len(b.cut) == 0 {
		return
	}
	// Walking the cuts from the highest, the draws above each add up.
	above, i := 0, b.n
	for j := len(b.cut) - 1; j >= 0; j-- {
		for ; i > b.cut[j]; i-- {
			above += int(b.counts[i-1])
		}
		b.hist[j*(b.n+1)+above]++
	}
}

// improvement is ProbImprovement of x over y with its interval: a
// bootstrap that resamples x's and y's runs independently within each task
// they share.
func improvement(x, y Group, o Options, stream uint64) (Interval, error) {
	v, err := ProbImprovement(x.Scores, y.Scores)
	if err != nil {
		return Interval{}, err
	}
	// Per task, the distinct scores of both sorted, and each run as the
	// index of its score there; a replicate's U is one walk over the
	// counts.
	type task struct {
		xi, yi []int32
		nu     int
	}
	var tasks []task
	for t := range min(len(x.Scores), len(y.Scores)) {
		xs, ys := x.Scores[t], y.Scores[t]
		if len(xs) == 0 || len(ys) == 0 {
			continue
		}
		u := slices.Concat(xs, ys)
		slices.Sort(u)
		u = slices.Compact(u)
		idx := func(vs []float64) []int32 {
			out := make([]int32, len(vs))
			for i, v := range vs {
				j, _ := slices.BinarySearch(u, v)
				out[i] = int32(j)
			}
			return out
		}
		tasks = append(tasks, task{idx(xs), idx(ys), len(u)})
	}
	nu := 0
	for _, t := range tasks {
		nu = max(nu, t.nu)
	}
	cx, cy := make([]int32, nu), make([]int32, nu)
	est := make([]float64, o.Reps)
	rng := rand.New(rand.NewPCG(o.Seed, improveStream|stream))
	for rep := range est {
		sum := 0.0
		for _, t := range tasks {
			clear(cx[:t.nu])
			clear(cy[:t.nu])
			nx, ny := uint32(len(t.xi)), uint32(len(t.yi))
			for range nx {
				cx[t.xi[rng.Uint32N(nx)]]++
			}
			for range ny {
				cy[t.yi[rng.Uint32N(ny)]]++
			}
			u, below := 0.0, 0.0
			for i := range t.nu {
				c := float64(cy[i])
				u += float64(cx[i]) * (below + c/2)
				below += c
			}
			sum += u / float64(nx*ny)
		}
		est[rep] = sum / float64(len(tasks))
	}
	qlo, qhi := o.quantiles()
	lo, hi := interval(est, qlo, qhi, new([]float64))
	return Interval{v, lo, hi}, nil
}
