package sweep

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/sweep/tpe"
)

const tpeSpec = `{"method":"tpe","budget":12,"seedCount":2,"maxParallel":5,
	"random":{"lr":{"dist":"loguniform","min":1e-4,"max":1e-1},"n":{"dist":"int","min":1,"max":4}}}`

// TestInitialAndSuggest: a tpe sweep is created with its first InFlight
// proposals, every seed of each; a proposal depends only on the spec, its
// index and the trials, so any master proposes the same.
func TestInitialAndSuggest(t *testing.T) {
	s := mustParse(t, tpeSpec)
	if s.Proposals() != 6 || s.InFlight() != 2 || s.SeedsPerProposal() != 2 {
		t.Fatalf("Proposals %d, InFlight %d, seeds %d; want 6, 2 (5 members ÷ 2 seeds), 2", s.Proposals(), s.InFlight(), s.SeedsPerProposal())
	}
	ms, err := s.Initial()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 4 {
		t.Fatalf("Initial: %d members; want 2 proposals × 2 seeds", len(ms))
	}
	for i, m := range ms {
		if m.Index != i || *m.Seed != int64(i%2) || string(m.Cell) != string(ms[i-i%2].Cell) {
			t.Fatalf("member %d: %+v", i, m)
		}
	}
	if string(ms[0].Cell) == string(ms[2].Cell) {
		t.Fatalf("two proposals alike: %s", ms[0].Cell)
	}
	x0, _ := s.Point(ms[0].Cell)
	trials := []tpe.Trial{{Params: x0, Value: 1}}
	a, err := s.Suggest(trials, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Suggest(trials, 1)
	if !reflect.DeepEqual(a, b) || a[0].Index != 2 {
		t.Fatalf("Suggest twice: %+v and %+v; want the same, numbered from 2", a, b)
	}
	f := func(body string, index int) {
		t.Helper()
		if _, err := mustParse(t, body).Suggest(nil, index); err == nil {
			t.Errorf("Suggest(%s, %d): no error", body, index)
		}
	}
	f(`{"grid":{"a":[1,2]}}`, 0)
	f(tpeSpec, 6)
	f(tpeSpec, -1)
	if got := mustParse(t, `{"method":"tpe","budget":30,"random":{"x":{"dist":"uniform","min":0,"max":1}}}`).InFlight(); got != DefaultInFlight {
		t.Errorf("InFlight without maxParallel: %d; want %d", got, DefaultInFlight)
	}
}

// TestOutcomes: runs group into proposals; a proposal runs while a seed
// does, is stopped when a seed was stopped early, and its value is the
// IQM of the scores that count; Best takes finished ones only.
func TestOutcomes(t *testing.T) {
	s := mustParse(t, tpeSpec)
	run := func(id, params string, st core.Status, reason string, pts ...float64) Run {
		var series [][2]float64
		for i, v := range pts {
			series = append(series, [2]float64{float64(100 * (i + 1)), v})
		}
		return Run{ID: id, Params: json.RawMessage(params), Status: st, Reason: reason, Series: series}
	}
	runs := []Run{
		run("a0", `{"lr":0.01,"n":2,"seed":0}`, core.StatusSucceeded, "", 1, 4),
		run("a1", `{"lr":0.01,"n":2,"seed":1}`, core.StatusSucceeded, "", 2, 6),
		run("b0", `{"lr":0.001,"n":1,"seed":0}`, core.StatusCancelled, core.ReasonEarlyStopped, 0.5),
		run("b1", `{"lr":0.001,"n":1,"seed":1}`, core.StatusCancelled, core.ReasonEarlyStopped, 0.1, 0.2),
		run("c0", `{"lr":0.05,"n":3,"seed":0}`, core.StatusSucceeded, "", 9),
		run("c1", `{"lr":0.05,"n":3,"seed":1}`, core.StatusRunning, "", 3),
		run("d0", `{"lr":0.02,"n":4,"seed":0}`, core.StatusFailed, "", 8),
		run("d1", `{"lr":0.02,"n":4,"seed":1}`, core.StatusFailed, ""),
		run("e0", `{"lr":0.03,"n":4,"seed":0}`, core.StatusSucceeded, "", 7),
		run("e1", `{"lr":0.03,"n":4,"seed":1}`, core.StatusCancelled, ""),
	}
	outs, err := s.Outcomes(runs)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		state tpe.State
		value float64
		step  int64
		runs  int
	}
	wants := []want{{tpe.Finished, 5, 0, 2}, {tpe.Stopped, 0.35, 200, 2}, {tpe.Running, math.NaN(), 0, 2},
		{tpe.Finished, math.NaN(), 0, 2}, {tpe.Finished, 7, 0, 2}}
	if len(outs) != len(wants) {
		t.Fatalf("%d outcomes; want %d", len(outs), len(wants))
	}
	for i, w := range wants {
		o := outs[i].Trial
		if o.State != w.state || o.Step != w.step || len(outs[i].Runs) != w.runs ||
			!(o.Value == w.value || math.IsNaN(w.value) && math.IsNaN(o.Value)) && math.Abs(o.Value-w.value) > 1e-12 {
			t.Errorf("outcome %d: %+v (runs %v); want %+v", i, o, outs[i].Runs, w)
		}
	}
	if x := outs[0].Trial.Params; x[0] != 0.01 || x[1] != 2 {
		t.Errorf("outcome 0's point %v; want [0.01 2]", x)
	}
	if b := s.Best(outs); b != 4 {
		t.Errorf("Best = %d; want 4 (7 beats 5; the running 9 and the failed do not count)", b)
	}
	if s.Best(outs[1:4]) != -1 {
		t.Error("Best of no finished outcome with a value is not -1")
	}
	if _, err := s.Outcomes([]Run{run("x", `{"lr":5,"n":2}`, core.StatusQueued, "")}); err == nil {
		t.Error("Outcomes of a run outside the space: no error")
	}
	if got := len(Trials(outs)); got != 5 {
		t.Errorf("Trials: %d", got)
	}
}
