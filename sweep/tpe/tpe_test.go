package tpe

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/rlsched/rlsched/sweep/goal"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0)) }

func TestValidate(t *testing.T) {
	f := func(p Param, wantErr string) {
		t.Helper()
		err := Space{p}.Validate()
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("Validate(%+v) = %v; want nil", p, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("Validate(%+v) = %v; want an error with %q", p, err, wantErr)
		}
	}
	f(Param{Name: "lr", Kind: LogUniform, Min: 1e-5, Max: 1}, "")
	f(Param{Name: "x", Kind: Uniform, Min: 1, Max: 1}, "")
	f(Param{Name: "n", Kind: Int, Min: -3, Max: 3}, "")
	f(Param{Name: "c", Kind: Categorical, N: 1}, "")
	f(Param{Name: "c", Kind: Categorical}, `"c": a categorical needs at least one choice`)
	f(Param{Name: "k"}, `"k": unknown kind`)
	f(Param{Name: "x", Kind: Uniform, Min: 2, Max: 1}, "min ≤ max")
	f(Param{Name: "x", Kind: Uniform, Min: math.NaN(), Max: 1}, "finite bounds")
	f(Param{Name: "x", Kind: Uniform, Min: 0, Max: math.Inf(1)}, "finite bounds")
	f(Param{Name: "lr", Kind: LogUniform, Min: 0, Max: 1}, "min > 0")
	f(Param{Name: "x", Kind: Uniform, Min: -1e308, Max: 1e308}, "max − min overflows")
	f(Param{Name: "lr", Kind: LogUniform, Min: 1e-308, Max: 1e308}, "")
	f(Param{Name: "n", Kind: Int, Min: 0.5, Max: 3}, "integer bounds")
	f(Param{Name: "n", Kind: Int, Min: 0, Max: 1 << 60}, "integer bounds")
}

func TestSuggestRefusesTrialsOutsideTheSpace(t *testing.T) {
	space := Space{{Name: "x", Kind: Uniform, Min: 0, Max: 1}, {Name: "c", Kind: Categorical, N: 2}}
	f := func(tr Trial, wantErr string) {
		t.Helper()
		_, err := Suggest(space, []Trial{{Params: []float64{0.5, 1}, Value: 1}, tr}, newRand(1), Options{})
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("Suggest with trial %+v = %v; want an error with %q", tr, err, wantErr)
		}
	}
	f(Trial{Params: []float64{0.5}}, "trial 1 has 1 params; the space has 2")
	f(Trial{Params: []float64{0.5, 1}, State: 7}, "trial 1 has an unknown state 7")
	f(Trial{Params: []float64{2, 0}}, `trial 1: param "x": 2 is outside`)
	f(Trial{Params: []float64{0.5, 2}}, `trial 1: param "c": 2 is outside`)
	f(Trial{Params: []float64{0.5, 0.5}}, `trial 1: param "c": 0.5 is outside`)
	f(Trial{Params: []float64{math.NaN(), 0}}, `trial 1: param "x": NaN is outside`)
}

func TestWeights(t *testing.T) {
	f := func(n int, want []float64) {
		t.Helper()
		got := weights(n)
		if len(got) != len(want) {
			t.Fatalf("weights(%d) = %v; want %v", n, got, want)
		}
		for i := range got {
			if math.Abs(got[i]-want[i]) > 1e-12 {
				t.Fatalf("weights(%d) = %v; want %v", n, got, want)
			}
		}
	}
	f(0, []float64{})
	f(3, []float64{1, 1, 1})
	ones := func(n int) []float64 {
		w := make([]float64, n)
		for i := range w {
			w[i] = 1
		}
		return w
	}
	f(25, ones(25))
	f(26, append([]float64{1.0 / 26}, ones(25)...))
	// numpy.linspace(1/30, 1, 5) then 25 ones
	f(30, append([]float64{1.0 / 30, 1.0/30 + (29.0/30)/4, 1.0/30 + 2*(29.0/30)/4, 1.0/30 + 3*(29.0/30)/4, 1}, ones(25)...))
}

// TestSplit: finished trials rank by value, then stopped ones by later
// step, then by value, then running ones; each side keeps trial order.
func TestSplit(t *testing.T) {
	f := func(g goal.Goal, trials []Trial, wantBelow, wantAbove []float64) {
		t.Helper()
		below, above := split(trials, g)
		if got := column(below, 0); !slices.Equal(got, wantBelow) {
			t.Errorf("below = %v; want %v", got, wantBelow)
		}
		if got := column(above, 0); !slices.Equal(got, wantAbove) {
			t.Errorf("above = %v; want %v", got, wantAbove)
		}
	}
	// Params[0] names each trial by its index.
	var trials []Trial
	add := func(v float64, s State, step int64) {
		trials = append(trials, Trial{Params: []float64{float64(len(trials))}, Value: v, State: s, Step: step})
	}
	for i := range 11 { // 0..10 finished, value i
		add(float64(i), Finished, 0)
	}
	add(100, Stopped, 10) // 11: stopped early with a great value
	add(50, Stopped, 30)  // 12: stopped later
	add(0, Running, 0)    // 13
	add(0, Running, 0)    // 14
	add(200, Stopped, 30) // 15
	// 16 trials: gamma 2. Maximising: 10 and 9, then 8..0, then 15 and 12
	// (step 30, by value), 11, and the running 13 and 14.
	f(goal.Maximize, trials, []float64{9, 10}, []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 14, 15})
	f(goal.Minimize, trials, []float64{0, 1}, []float64{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	// Only stopped and running trials: the latest stopped is the best.
	trials = nil
	add(1, Running, 0)
	add(5, Stopped, 10)
	add(1, Stopped, 20)
	f(goal.Maximize, trials, []float64{2}, []float64{0, 1})
}

// TestSuggestCountsRunning: running trials count towards the startup ones
// and their values are not read.
func TestSuggestCountsRunning(t *testing.T) {
	space := Space{{Name: "x", Kind: Uniform, Min: 0, Max: 1}}
	var trials []Trial
	for i := range 10 {
		trials = append(trials, Trial{Params: []float64{float64(i) / 10}, Value: math.NaN(), State: Running})
	}
	got, err := Suggest(space, trials, newRand(7), Options{})
	if err != nil {
		t.Fatal(err)
	}
	random, _ := Suggest(space, nil, newRand(7), Options{})
	if got[0] == random[0] || !space[0].Contains(got[0]) {
		t.Errorf("with 10 running trials Suggest = %v; want a TPE proposal, not the random draw %v", got, random)
	}
}

func TestGamma(t *testing.T) {
	for n, want := range map[int]int{1: 1, 10: 1, 11: 2, 100: 10, 250: 25, 1000: 25} {
		if got := gamma(n); got != want {
			t.Errorf("gamma(%d) = %d; want %d", n, got, want)
		}
	}
}

// TestParzenBandwidths checks the kernels' bandwidths against Optuna's rule
// worked by hand: domain [0, 10], observations 2, 3, 9 and the prior at 5.
func TestParzenBandwidths(t *testing.T) {
	z := newParzen(0, 10, []float64{2, 3, 9}, []float64{1, 1, 1}, 1)
	// sorted 2, 3, 5, 9: the outer kernels look only inward (1 and 4), the
	// inner ones take the larger gap (3: max(1, 2); the prior: 10); the
	// clip is [10/5, 10].
	want := []float64{2, 2, 4, 10}
	for k, s := range z.sigmas {
		if s != want[k] {
			t.Errorf("sigmas = %v; want %v", z.sigmas, want)
			break
		}
	}
	for k, w := range z.weights {
		if w != 0.25 {
			t.Errorf("weights[%d] = %v; want 0.25", k, w)
		}
	}
	// The density integrates to 1 over the domain.
	var total float64
	const steps = 10000
	for i := range steps {
		total += math.Exp(z.logPDF((float64(i)+0.5)*10/steps)) * 10 / steps
	}
	if math.Abs(total-1) > 1e-3 {
		t.Errorf("the density integrates to %v; want 1", total)
	}
}

func TestCategoricalProbs(t *testing.T) {
	// Two observations of choice 0 out of 3, weights 1, prior 1: three
	// kernels, so each observation's is (1+1/3, 1/3, 1/3)/2 and the prior's
	// uniform, mixed 1/3 each.
	c := newCategorical(3, []float64{0, 0}, []float64{1, 1}, 1)
	want := []float64{5.0 / 9, 2.0 / 9, 2.0 / 9}
	for i, p := range c.probs {
		if math.Abs(p-want[i]) > 1e-12 {
			t.Errorf("probs = %v; want %v", c.probs, want)
			break
		}
	}
}

func TestNormalMass(t *testing.T) {
	f := func(a, b, want float64) {
		t.Helper()
		if got := normalMass(a, b); math.Abs(got-want) > 1e-9*max(want, 1e-300) && math.Abs(got-want) > 1e-15 {
			t.Errorf("normalMass(%v, %v) = %v; want %v", a, b, got, want)
		}
	}
	f(-1, 1, 0.6826894921370859)
	f(0, math.Inf(1), 0.5)
	f(math.Inf(-1), math.Inf(1), 1)
	f(10, 11, 7.619853024160526e-24-1.9106595744986828e-28) // Q(10) − Q(11)
	f(-11, -10, 7.619853024160526e-24-1.9106595744986828e-28)
	f(0, 1e-9, 1e-9/math.Sqrt(2*math.Pi))
}

func TestSuggestStartup(t *testing.T) {
	space := Space{{Name: "x", Kind: Uniform, Min: 0, Max: 1}}
	// NaN trials do not count towards the startup trials: with 9 of a value
	// and 5 NaNs the suggestion is still a random draw, the same as with no
	// trials at all.
	var trials []Trial
	for i := range 9 {
		trials = append(trials, Trial{Params: []float64{float64(i) / 10}, Value: float64(i)})
	}
	for range 5 {
		trials = append(trials, Trial{Params: []float64{0.95}, Value: math.NaN()})
	}
	got, err := Suggest(space, trials, newRand(7), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Suggest(space, nil, newRand(7), Options{})
	if got[0] != want[0] {
		t.Errorf("with 9 trials of a value Suggest = %v; want the random draw %v", got, want)
	}
}

// TestSuggestEdges: every edge still gives a value inside the space.
func TestSuggestEdges(t *testing.T) {
	mixed := Space{
		{Name: "x", Kind: Uniform, Min: -1, Max: 1},
		{Name: "lr", Kind: LogUniform, Min: 1e-4, Max: 1},
		{Name: "n", Kind: Int, Min: 1, Max: 4},
		{Name: "c", Kind: Categorical, N: 3},
		{Name: "fixed", Kind: Uniform, Min: 2, Max: 2},
		{Name: "one", Kind: Categorical, N: 1},
	}
	cat := Space{{Name: "a", Kind: Categorical, N: 4}, {Name: "b", Kind: Categorical, N: 2}}
	f := func(name string, space Space, value func(i int) float64) {
		t.Helper()
		rng := newRand(3)
		var trials []Trial
		for i := range 40 {
			x, err := Suggest(space, trials, rng, Options{})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			checkInside(t, space, x)
			trials = append(trials, Trial{Params: x, Value: value(i)})
		}
	}
	f("equal values", mixed, func(int) float64 { return 1 })
	f("NaN among values", mixed, func(i int) float64 { return [...]float64{math.NaN(), 1, 2}[i%3] })
	f("infinite values", mixed, func(i int) float64 { return [...]float64{math.Inf(1), math.Inf(-1), 0}[i%3] })
	f("only categorical", cat, func(i int) float64 { return float64(i % 5) })
	f("empty space", Space{}, func(i int) float64 { return float64(i) })
}

// fataler is what checkInside needs of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func checkInside(t fataler, space Space, x []float64) {
	t.Helper()
	if len(x) != len(space) {
		t.Fatalf("suggestion %v has %d values; the space has %d", x, len(x), len(space))
	}
	for i, p := range space {
		if !p.Contains(x[i]) {
			t.Fatalf("suggestion %v: %s = %v is outside %+v", x, p.Name, x[i], p)
		}
	}
}

// TestSuggestFollowsTheGoal: after trials where choice 2 is clearly the
// best (or, minimising, the worst), TPE mostly proposes it (or avoids it).
func TestSuggestFollowsTheGoal(t *testing.T) {
	space := Space{{Name: "c", Kind: Categorical, N: 4}, {Name: "x", Kind: Uniform, Min: 0, Max: 1}}
	var trials []Trial
	for i := range 40 {
		c := float64(i % 4)
		v := 0.0
		if c == 2 {
			v = 1
		}
		trials = append(trials, Trial{Params: []float64{c, float64(i) / 40}, Value: v})
	}
	f := func(g goal.Goal, wantMost bool) {
		t.Helper()
		rng := newRand(5)
		twos := 0
		for range 100 {
			x, err := Suggest(space, trials, rng, Options{Goal: g})
			if err != nil {
				t.Fatal(err)
			}
			if x[0] == 2 {
				twos++
			}
		}
		if wantMost != (twos > 80) || !wantMost && twos > 20 {
			t.Errorf("goal %q: choice 2 proposed %d times of 100", g, twos)
		}
	}
	f(goal.Maximize, true)
	f(goal.Minimize, false)
}

func TestSuggestProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var space Space
		for i := range rapid.IntRange(0, 4).Draw(t, "params") {
			p := Param{Name: string(rune('a' + i))}
			switch rapid.IntRange(0, 3).Draw(t, "kind") {
			case 0:
				p.Kind, p.N = Categorical, rapid.IntRange(1, 5).Draw(t, "n")
			case 1:
				p.Kind = Int
				p.Min = float64(rapid.IntRange(-1000, 1000).Draw(t, "min"))
				p.Max = p.Min + float64(rapid.IntRange(0, 1<<20).Draw(t, "width"))
			case 2:
				p.Kind = Uniform
				p.Min = rapid.Float64Range(-1e6, 1e6).Draw(t, "min")
				p.Max = p.Min + rapid.Float64Range(0, 1e6).Draw(t, "width")
			case 3:
				p.Kind = LogUniform
				p.Min = rapid.Float64Range(1e-8, 1).Draw(t, "min")
				p.Max = p.Min * rapid.Float64Range(1, 1e8).Draw(t, "ratio")
			}
			space = append(space, p)
		}
		seed := rapid.Uint64().Draw(t, "seed")
		values := rapid.SliceOfN(rapid.SampledFrom([]float64{0, 1, 2, -5, 1e9, math.NaN()}), 0, 30).Draw(t, "values")
		g := rapid.SampledFrom([]goal.Goal{goal.Maximize, goal.Minimize}).Draw(t, "goal")
		opt := Options{Goal: g, StartupTrials: rapid.IntRange(0, 5).Draw(t, "startup")}

		// The trials are TPE's own proposals, as in a sweep.
		rng := newRand(seed)
		var trials []Trial
		for _, v := range values {
			x, err := Suggest(space, trials, rng, opt)
			if err != nil {
				t.Fatal(err)
			}
			checkInside(t, space, x)
			st := rapid.SampledFrom([]State{Finished, Finished, Stopped, Running}).Draw(t, "state")
			trials = append(trials, Trial{Params: x, Value: v, State: st, Step: int64(rapid.IntRange(0, 3).Draw(t, "step"))})
		}
		a, err := Suggest(space, trials, newRand(seed+1), opt)
		if err != nil {
			t.Fatal(err)
		}
		checkInside(t, space, a)
		b, _ := Suggest(space, trials, newRand(seed+1), opt)
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("the same seed suggested %v, then %v", a, b)
			}
		}
	})
}
