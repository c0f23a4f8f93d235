package earlystop

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/rlsched/rlsched/sweep/goal"
)

func TestValidate_Success(t *testing.T) {
	f := func(c Config) {
		t.Helper()
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v; want nil", c, err)
		}
	}
	f(Config{Method: ASHA, Goal: goal.Maximize, MinSteps: 100})
	f(Config{Method: ASHA, Goal: goal.Minimize, MinSteps: 1, ReductionFactor: 2})
	f(Config{Method: ASHA, Goal: goal.Maximize, Rungs: []int64{10, 30, 1000}})
	f(Config{Method: Median, Goal: goal.Maximize})
	f(Config{Method: Median, Goal: goal.Minimize, MinSteps: 500})
}

func TestValidate_Failure(t *testing.T) {
	f := func(c Config, field, msg string) {
		t.Helper()
		err := c.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != field || !strings.Contains(ce.Message, msg) {
			t.Errorf("Validate(%+v) = %v; want a ConfigError on %s with %q", c, err, field, msg)
		}
		if _, nerr := New(c); nerr == nil || nerr.Error() != err.Error() {
			t.Errorf("New(%+v) = %v; want Validate's error", c, nerr)
		}
	}
	f(Config{Method: "hyperband", Goal: goal.Maximize, MinSteps: 1}, "method", `"asha" or "median"`)
	f(Config{Method: ASHA, MinSteps: 1}, "goal", `"maximize" or "minimize"`)
	f(Config{Method: ASHA, Goal: goal.Maximize}, "minSteps", "minSteps ≥ 1")
	f(Config{Method: ASHA, Goal: goal.Maximize, MinSteps: -1}, "minSteps", "0..")
	f(Config{Method: ASHA, Goal: goal.Maximize, MinSteps: 1, ReductionFactor: 1}, "reductionFactor", "2..100")
	f(Config{Method: ASHA, Goal: goal.Maximize, MinSteps: 1, ReductionFactor: -3}, "reductionFactor", "2..100")
	f(Config{Method: ASHA, Goal: goal.Maximize, Rungs: []int64{}}, "rungs", "give 1..64 steps")
	f(Config{Method: ASHA, Goal: goal.Maximize, Rungs: make([]int64, 65)}, "rungs", "give 1..64 steps")
	f(Config{Method: ASHA, Goal: goal.Maximize, MinSteps: 10, Rungs: []int64{10, 30}}, "rungs", "not both")
	f(Config{Method: ASHA, Goal: goal.Maximize, Rungs: []int64{0, 30}}, "rungs[0]", "1..")
	f(Config{Method: ASHA, Goal: goal.Maximize, Rungs: []int64{10, 30, 30}}, "rungs[2]", "greater than rungs[1] (30)")
	f(Config{Method: ASHA, Goal: goal.Maximize, Rungs: []int64{10, 300, 30}}, "rungs[2]", "greater than rungs[1] (300)")
	f(Config{Method: Median, Goal: goal.Maximize, ReductionFactor: 3}, "reductionFactor", "only to asha")
	f(Config{Method: Median, Goal: goal.Maximize, Rungs: []int64{10}}, "rungs", "only to asha")
}

func TestRungSteps(t *testing.T) {
	got := Config{Method: ASHA, MinSteps: 10}.rungSteps()
	if want := []int64{10, 30, 90, 270, 810}; !slices.Equal(got[:5], want) {
		t.Errorf("rungs = %v…; want %v…", got[:5], want)
	}
	last := got[len(got)-1]
	if last > maxStep || last*3 <= maxStep {
		t.Errorf("the last rung %d is not the last power below %d", last, int64(maxStep))
	}
	got = Config{Method: ASHA, Rungs: []int64{5, 50}}.rungSteps()
	if want := []int64{5, 50}; !slices.Equal(got, want) {
		t.Errorf("rungs = %v; want %v", got, want)
	}
}

// report is one report and the decision expected of it: "-" not judged,
// else "continue" or "stop" with the rung (or step), value, cut and peers.
type report struct {
	member string
	step   int64
	value  float64
	want   string
}

func decisionString(d Decision, judged bool) string {
	if !judged {
		return "-"
	}
	verb := "continue"
	if d.Stop {
		verb = "stop"
	}
	return fmt.Sprintf("%s %s@%d r%d/%d %g cut %g of %d", verb, d.Member, d.Step, d.Rung, d.RungStep, d.Value, d.Cut, d.Peers)
}

func play(t *testing.T, s *Stopper, reports []report) {
	t.Helper()
	for i, r := range reports {
		if got := decisionString(s.Report(r.member, r.step, r.value)); got != r.want {
			t.Errorf("report %d (%s@%d = %g): %s; want %s", i, r.member, r.step, r.value, got, r.want)
		}
	}
}

func mustNew(t *testing.T, c Config) *Stopper {
	t.Helper()
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestASHA(t *testing.T) {
	s := mustNew(t, Config{Method: ASHA, Goal: goal.Maximize, Rungs: []int64{10, 30}})
	play(t, s, []report{
		{"a", 5, 1, "-"}, // before the first rung
		{"a", 10, 5, "continue a@10 r0/10 5 cut 5 of 1"}, // the first at a rung continues
		{"b", 10, 3, "stop b@10 r0/10 3 cut 5 of 2"},     // ⌈2/3⌉ = 1 continues
		{"c", 12, 7, "continue c@12 r0/10 7 cut 7 of 3"}, // past the rung counts as at it
		{"d", 10, 6, "continue d@10 r0/10 6 cut 6 of 4"}, // ⌈4/3⌉ = 2: 7, 6
		{"e", 10, 6, "continue e@10 r0/10 6 cut 6 of 5"}, // a tie with the cut continues
		{"f", 10, 5, "stop f@10 r0/10 5 cut 6 of 6"},     // 7, 6 | 6, 5, 5, 3
		{"a", 20, 9, "-"}, // no new rung
		{"a", 30, 9, "continue a@30 r1/30 9 cut 9 of 1"}, //
		{"a", 30, 1, "-"},                                            // a step not after the last is ignored
		{"a", 40, math.NaN(), "-"},                                   // NaN is no report
		{"b", 40, 100, "stop b@10 r0/10 3 cut 5 of 2"},               // stopped stays stopped
		{"g", 50, 2, "stop g@50 r1/30 2 cut 9 of 2"},                 // a jump past both rungs: judged at the higher only
		{"g", 60, 2, "stop g@50 r1/30 2 cut 9 of 2"},                 //
		{"h", 10, math.NaN(), "-"},                                   // never a value: never judged
		{"a", 1000, 1, "-"},                                          // past the last rung, never judged again
		{"c", 1 << 40, 0, "stop c@1099511627776 r1/30 0 cut 9 of 3"}, //
	})
	var stops []string
	for _, d := range s.Decisions() {
		if d.Stop {
			stops = append(stops, d.Member)
		}
	}
	if want := []string{"b", "f", "g", "c"}; !slices.Equal(stops, want) {
		t.Errorf("stops kept: %v; want %v", stops, want)
	}
	if n := len(s.Decisions()); n != 9 {
		t.Errorf("%d decisions kept; want 9, one per rung judged", n)
	}
	if d, ok := s.Stopped("f"); !ok || d.Rung != 0 || !strings.Contains(d.Reason(), "stopped at rung 0 (step 10): 5 vs cut 6 of 6") {
		t.Errorf("Stopped(f) = %+v, %v: %q", d, ok, d.Reason())
	}
	if _, ok := s.Stopped("a"); ok {
		t.Error("a is stopped")
	}
	if s.Reported("h") || s.Reported("nobody") || !s.Reported("a") {
		t.Error("Reported: h and nobody gave no value, a did")
	}
}

// TestASHAMinimize: the same reports with the values negated and the goal
// minimize stop the same members.
func TestASHAMinimize(t *testing.T) {
	s := mustNew(t, Config{Method: ASHA, Goal: goal.Minimize, MinSteps: 10, ReductionFactor: 2})
	play(t, s, []report{
		{"a", 10, -5, "continue a@10 r0/10 -5 cut -5 of 1"},
		{"b", 10, -3, "stop b@10 r0/10 -3 cut -5 of 2"},
		{"c", 10, -7, "continue c@10 r0/10 -7 cut -5 of 3"}, // ⌈3/2⌉ = 2: -7, -5
		{"d", 10, -4, "stop d@10 r0/10 -4 cut -5 of 4"},
		{"a", 20, -6, "continue a@20 r1/20 -6 cut -6 of 1"}, // η=2: rungs 10, 20, 40
		{"c", 40, -1, "continue c@40 r2/40 -1 cut -1 of 1"},
	})
}

func TestMedian(t *testing.T) {
	s := mustNew(t, Config{Method: Median, Goal: goal.Maximize, MinSteps: 20})
	play(t, s, []report{
		{"a", 10, 1, "-"},
		{"a", 20, 3, "-"}, // no peers yet
		{"a", 30, 5, "-"},
		{"b", 10, 2, "-"},
		{"b", 20, 2, "-"}, // one peer: a
		{"b", 30, 2, "-"},
		{"c", 10, 0, "-"},
		{"c", 20, 4, "-"}, // two peers
		// d at 20 sees a (avg 2), b (2), c (2) at step 20: median 2.
		{"d", 10, 1, "-"}, // before MinSteps
		{"d", 20, 1.5, "stop d@20 r-1/20 1.5 cut 2 of 3"},
		{"d", 30, 100, "stop d@20 r-1/20 1.5 cut 2 of 3"},
		// e's best 2.5 at 20 beats the median 2 of a, b, c, d (2, 2, 2, 1.25).
		{"e", 20, 2.5, "continue e@20 r-1/20 2.5 cut 2 of 4"},
		// at 30 only a (3) and b (2) reached it: too few peers.
		{"e", 30, 0, "-"},
		// at 30: a 3, b 2, e 1.25; d stopped at 20, so never reached 30.
		{"c", 30, 9, "continue c@30 r-1/30 9 cut 2 of 3"},
		{"f", 40, 1, "-"}, // nobody reached 40
		{"g", 5, math.NaN(), "-"},
	})
	if n := len(s.Decisions()); n != 1 {
		t.Errorf("%d decisions kept; want 1: under median only stops are kept", n)
	}
	if d, _ := s.Stopped("d"); !strings.Contains(d.Reason(), "stopped at step 20: best 1.5 vs median 2 of 3 other members") {
		t.Errorf("reason %q", d.Reason())
	}
}

// TestASHAProperties: over any reports, the member best so far at a rung is
// never stopped there (the first to reach a rung among them), a stopped
// member stays stopped, and the same reports decide the same.
func TestASHAProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := rapid.SampledFrom([]goal.Goal{goal.Maximize, goal.Minimize}).Draw(t, "goal")
		cfg := Config{Method: ASHA, Goal: g, MinSteps: int64(rapid.IntRange(1, 5).Draw(t, "minSteps")),
			ReductionFactor: rapid.IntRange(2, 4).Draw(t, "eta")}
		type rep struct {
			m     string
			step  int64
			value float64
		}
		var reps []rep
		last := map[string]int64{}
		for range rapid.IntRange(0, 60).Draw(t, "reports") {
			m := rapid.SampledFrom([]string{"a", "b", "c", "d", "e"}).Draw(t, "member")
			last[m] += int64(rapid.IntRange(1, 20).Draw(t, "advance"))
			reps = append(reps, rep{m, last[m], float64(rapid.IntRange(0, 5).Draw(t, "value"))})
		}
		s1, s2 := mustNewRapid(t, cfg), mustNewRapid(t, cfg)
		bestAt := map[int]float64{}
		stopped := map[string]bool{}
		for _, r := range reps {
			d1, j1 := s1.Report(r.m, r.step, r.value)
			d2, j2 := s2.Report(r.m, r.step, r.value)
			if decisionString(d1, j1) != decisionString(d2, j2) {
				t.Fatalf("the same report decided %s, then %s", decisionString(d1, j1), decisionString(d2, j2))
			}
			if stopped[r.m] && !d1.Stop {
				t.Fatalf("%s was stopped, then %s", r.m, decisionString(d1, j1))
			}
			if !j1 || stopped[r.m] {
				continue
			}
			if b, seen := bestAt[d1.Rung]; !seen || !g.Better(b, d1.Value) {
				if d1.Stop {
					t.Fatalf("the best so far at rung %d was stopped: %s", d1.Rung, decisionString(d1, j1))
				}
				bestAt[d1.Rung] = d1.Value
			}
			stopped[r.m] = d1.Stop
		}
	})
}

func mustNewRapid(t *rapid.T, c Config) *Stopper {
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestKeep: a continue kept from before holds at its rung though a replay
// in which a better member reached the rung first would stop the member;
// the kept member's value still counts towards the next one's cut.
func TestKeep(t *testing.T) {
	cfg := Config{Method: ASHA, Goal: goal.Maximize, Rungs: []int64{10}, ReductionFactor: 2}
	replay := func(keep bool) (Decision, Decision) {
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if keep {
			s.Keep(Decision{Member: "low", Rung: 0, RungStep: 10, Value: 1, Cut: 1, Peers: 1})
			s.Keep(Decision{Member: "median", Rung: -1, Stop: true}) // not kept: Median only
		}
		s.Report("high", 10, 5) // reported after "low" at first, replayed before it
		low, _ := s.Report("low", 10, 1)
		third, _ := s.Report("third", 10, 3)
		return low, third
	}
	if low, _ := replay(false); !low.Stop {
		t.Fatalf("without Keep: %+v; want the replay to stop it", low)
	}
	low, third := replay(true)
	if low.Stop || low.Cut != 1 || low.Peers != 1 || low.Step != 10 || low.Member != "low" {
		t.Fatalf("with Keep: %+v; want the kept continue", low)
	}
	// third's cut is over {5, 3, 1}: ⌈3/2⌉ = 2 kept, cut 3, so it continues;
	// without low's value it would be over {5, 3} and the cut 5 would stop it.
	if third.Stop || third.Peers != 3 || third.Cut != 3 {
		t.Fatalf("third: %+v; want a continue over 3 peers with the cut 3", third)
	}
}
