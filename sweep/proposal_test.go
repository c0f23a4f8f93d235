package sweep

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/sweep/tpe"
)

const searchSpec = `{"method":"tpe","grid":{"opt":["adam",{"name":"sgd","momentum":0.9}]},"random":{
	"lr":{"dist":"loguniform","min":1e-5,"max":1e-2},
	"clip":{"dist":"uniform","min":0.1,"max":0.3},
	"n":{"dist":"int","min":1,"max":8},
	"act":{"dist":"choice","values":["relu","tanh","gelu"]}},
	"budget":6,"seeds":[3,4],"randomSeed":9}`

func TestSpace(t *testing.T) {
	got := mustParse(t, searchSpec).Space()
	want := tpe.Space{
		{Name: "act", Kind: tpe.Categorical, N: 3},
		{Name: "clip", Kind: tpe.Uniform, Min: 0.1, Max: 0.3},
		{Name: "lr", Kind: tpe.LogUniform, Min: 1e-5, Max: 1e-2},
		{Name: "n", Kind: tpe.Int, Min: 1, Max: 8},
		{Name: "opt", Kind: tpe.Categorical, N: 2},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Space = %+v; want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
	// A grid sweep's space is its axes, so importance reads any sweep.
	if got := mustParse(t, `{"grid":{"b":[1,2,3],"a":["x"]}}`).Space(); !slices.Equal(got, tpe.Space{
		{Name: "a", Kind: tpe.Categorical, N: 1}, {Name: "b", Kind: tpe.Categorical, N: 3},
	}) {
		t.Errorf("grid Space = %+v", got)
	}
}

// TestProposalRoundTrip: every member's cell is a point of the space, and
// proposing that point gives the same cell and params back.
func TestProposalRoundTrip(t *testing.T) {
	for _, body := range []string{
		searchSpec,
		`{"grid":{"a":[1,2]},"random":{"lr":{"dist":"uniform","min":0,"max":1}},"samples":3}`,
		`{"grid":{"a":[[1,2],{"k":"v"}],"b":["x"]},"seedCount":2}`,
		`{"seedCount":2}`,
	} {
		s := mustParse(t, body)
		space := s.Space()
		for _, m := range s.Members() {
			x, err := s.Point(m.Cell)
			if err != nil {
				t.Fatalf("%s: Point(%s): %v", body, m.Cell, err)
			}
			for i, p := range space {
				if !p.Contains(x[i]) {
					t.Fatalf("%s: Point(%s) = %v: %s outside the space", body, m.Cell, x, p.Name)
				}
			}
			ms, err := s.Proposal(x, 0)
			if err != nil {
				t.Fatalf("%s: Proposal(%v): %v", body, x, err)
			}
			// The member is the proposal's one with its seed.
			var again *Member
			for i := range ms {
				if ms[i].Label == m.Label {
					again = &ms[i]
				}
			}
			if again == nil || string(again.Cell) != string(m.Cell) || string(again.Params) != string(m.Params) {
				t.Fatalf("%s: member %s (%s) proposed again as %v", body, m.Label, m.Params, memberLines(ms))
			}
		}
	}
}

// TestProposalFromTPE: TPE's suggestions for a spec become members with
// the seeds, numbered on, and read back as the same points.
func TestProposalFromTPE(t *testing.T) {
	s := mustParse(t, searchSpec)
	rng := rand.New(rand.NewPCG(1, 2))
	var trials []tpe.Trial
	index := 0
	for i := range 15 {
		x, err := tpe.Suggest(s.Space(), trials, rng, tpe.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ms, err := s.Proposal(x, index)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 2 || ms[0].Index != index || ms[1].Index != index+1 || *ms[0].Seed != 3 || *ms[1].Seed != 4 ||
			!strings.HasSuffix(ms[1].Label, " seed=4") {
			t.Fatalf("proposal %d: %+v", i, ms)
		}
		index += len(ms)
		back, err := s.Point(ms[0].Cell)
		if err != nil || !slices.Equal(back, x) {
			t.Fatalf("Point(%s) = %v, %v; want %v", ms[0].Cell, back, err, x)
		}
		trials = append(trials, tpe.Trial{Params: x, Value: float64(i % 4)})
	}
}

func TestProposalErrors(t *testing.T) {
	s := mustParse(t, searchSpec)
	// An object value matches whatever the order of its keys.
	if x, err := s.Point(json.RawMessage(`{"act":"gelu","clip":0.2,"lr":0.001,"n":2,"opt":{"momentum":0.9,"name":"sgd"}}`)); err != nil ||
		!slices.Equal(x, []float64{2, 0.2, 0.001, 2, 1}) {
		t.Errorf("Point = %v, %v; want [2 0.2 0.001 2 1]", x, err)
	}
	f := func(x []float64, wantErr string) {
		t.Helper()
		if _, err := s.Proposal(x, 0); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("Proposal(%v) = %v; want an error with %q", x, err, wantErr)
		}
	}
	f([]float64{0, 0.2}, "cannot propose 2 values for a space of 5 params")
	f([]float64{3, 0.2, 1e-3, 2, 0}, "act = 3: outside")
	f([]float64{0, 0.5, 1e-3, 2, 0}, "clip = 0.5: outside")
	f([]float64{0, 0.2, 1e-3, 2.5, 0}, "n = 2.5: outside")

	g := func(cell, wantErr string) {
		t.Helper()
		if _, err := s.Point(json.RawMessage(cell)); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("Point(%s) = %v; want an error with %q", cell, err, wantErr)
		}
	}
	g(`[1]`, "cannot read cell [1]")
	g(`{"act":"relu","clip":0.2,"lr":0.001,"n":2}`, "it lacks opt")
	g(`{"act":"swish","clip":0.2,"lr":0.001,"n":2,"opt":"adam"}`, `act: "swish" is not one of its values`)
	g(`{"act":"relu","clip":0.2,"lr":1,"n":2,"opt":"adam"}`, "lr: 1 is not a value of its loguniform range")
	g(`{"act":"relu","clip":0.2,"lr":0.001,"n":2.5,"opt":"adam"}`, "n: 2.5 is not a value of its int range")
	g(`{"act":"relu","clip":"0.2","lr":0.001,"n":2,"opt":"adam"}`, `clip: "0.2" is not a value`)
}
