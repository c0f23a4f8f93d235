package sweep

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func mustParse(t testing.TB, body string) *Spec {
	t.Helper()
	s, err := Parse([]byte(body))
	if err != nil {
		t.Fatalf("Parse(%s): %v", body, err)
	}
	return s
}

// memberLines writes each member as "params | label" (and the seed), one a line.
func memberLines(ms []Member) string {
	var b strings.Builder
	for i, m := range ms {
		if m.Index != i {
			fmt.Fprintf(&b, "INDEX %d ", m.Index)
		}
		seed := "-"
		if m.Seed != nil {
			seed = fmt.Sprint(*m.Seed)
		}
		fmt.Fprintf(&b, "%s | %s | %s | %s\n", m.Params, m.Cell, seed, m.Label)
	}
	return b.String()
}

func TestMembers(t *testing.T) {
	f := func(body, want string) {
		t.Helper()
		got := memberLines(mustParse(t, body).Members())
		want = strings.TrimLeft(want, "\n")
		if got != want {
			t.Errorf("members of %s:\n%s\nwant:\n%s", body, got, want)
		}
	}
	// Grid names sorted (batch before lr), the first slowest, values in the
	// order given; seeds innermost. A grid value replaces the base value of
	// the same name in place; new names follow base's, then the seed.
	f(`{"base":{"algorithm":"PPO","params":{"lr":1,"gamma":0.9}},"grid":{"lr":[0.001,3e-4],"batch":[64,32]},"seeds":[7,8]}`, `
{"lr":0.001,"gamma":0.9,"batch":64,"seed":7} | {"batch":64,"lr":0.001} | 7 | batch=64 lr=0.001 seed=7
{"lr":0.001,"gamma":0.9,"batch":64,"seed":8} | {"batch":64,"lr":0.001} | 8 | batch=64 lr=0.001 seed=8
{"lr":3e-4,"gamma":0.9,"batch":64,"seed":7} | {"batch":64,"lr":3e-4} | 7 | batch=64 lr=3e-4 seed=7
{"lr":3e-4,"gamma":0.9,"batch":64,"seed":8} | {"batch":64,"lr":3e-4} | 8 | batch=64 lr=3e-4 seed=8
{"lr":0.001,"gamma":0.9,"batch":32,"seed":7} | {"batch":32,"lr":0.001} | 7 | batch=32 lr=0.001 seed=7
{"lr":0.001,"gamma":0.9,"batch":32,"seed":8} | {"batch":32,"lr":0.001} | 8 | batch=32 lr=0.001 seed=8
{"lr":3e-4,"gamma":0.9,"batch":32,"seed":7} | {"batch":32,"lr":3e-4} | 7 | batch=32 lr=3e-4 seed=7
{"lr":3e-4,"gamma":0.9,"batch":32,"seed":8} | {"batch":32,"lr":3e-4} | 8 | batch=32 lr=3e-4 seed=8
`)
	// Seeds only: one cell, a seed group. seedCount n is seeds 0..n-1.
	f(`{"base":{"command":["python3","train.py"]},"seedCount":3}`, `
{"seed":0} | {} | 0 | seed=0
{"seed":1} | {} | 1 | seed=1
{"seed":2} | {} | 2 | seed=2
`)
	// seeds override a seed in base.params, in place.
	f(`{"base":{"params":{"seed":99,"x":"a"}},"seeds":[5]}`, `
{"seed":5,"x":"a"} | {} | 5 | seed=5
`)
	// No seeds: no seed param is added, one member per cell; strings and
	// structured values as given, the label shows strings bare.
	f(`{"grid":{"env":["CartPole-v1","Acrobot"],"layers":[[64,64]]}}`, `
{"env":"CartPole-v1","layers":[64,64]} | {"env":"CartPole-v1","layers":[64,64]} | - | env=CartPole-v1 layers=[64,64]
{"env":"Acrobot","layers":[64,64]} | {"env":"Acrobot","layers":[64,64]} | - | env=Acrobot layers=[64,64]
`)
	// A grid over seed alone is allowed: the members differ in seed only.
	f(`{"base":{"params":{"lr":0.1}},"grid":{"seed":[1,2]}}`, `
{"lr":0.1,"seed":1} | {"seed":1} | - | seed=1
{"lr":0.1,"seed":2} | {"seed":2} | - | seed=2
`)
	// Values keep their JSON text (no HTML escaping, whitespace compacted).
	f(`{"grid":{"s":["<a&b>", "x y"], "o": [ {"k" : 1} ]}}`, `
{"o":{"k":1},"s":"<a&b>"} | {"o":{"k":1},"s":"<a&b>"} | - | o={"k":1} s=<a&b>
{"o":{"k":1},"s":"x y"} | {"o":{"k":1},"s":"x y"} | - | o={"k":1} s=x y
`)
}

// TestMembersRandomGolden pins the random draws of a spec: the same spec
// must expand to the same members in every release, or a rerun sweep would
// quietly test other values. The params keep every digit; the labels (run
// names) have 4 significant ones (issue 32).
func TestMembersRandomGolden(t *testing.T) {
	s := mustParse(t, `{"grid":{"g":[1,2]},"random":{
		"lr":{"dist":"loguniform","min":1e-5,"max":1e-2},
		"clip":{"dist":"uniform","min":0.1,"max":0.3},
		"n":{"dist":"int","min":1,"max":8},
		"opt":{"dist":"choice","values":["adam","sgd","rmsprop"]}},
		"samples":2,"seedCount":1,"randomSeed":12345}`)
	got := memberLines(s.Members())
	want := strings.TrimLeft(`
{"clip":0.17541102691729335,"g":1,"lr":0.003832381952508782,"n":2,"opt":"sgd","seed":0} | {"clip":0.17541102691729335,"g":1,"lr":0.003832381952508782,"n":2,"opt":"sgd"} | 0 | clip=0.1754 g=1 lr=0.003832 n=2 opt=sgd seed=0
{"clip":0.2750797007244109,"g":1,"lr":0.0001234665752399724,"n":4,"opt":"sgd","seed":0} | {"clip":0.2750797007244109,"g":1,"lr":0.0001234665752399724,"n":4,"opt":"sgd"} | 0 | clip=0.2751 g=1 lr=0.0001235 n=4 opt=sgd seed=0
{"clip":0.17541102691729335,"g":2,"lr":0.003832381952508782,"n":2,"opt":"sgd","seed":0} | {"clip":0.17541102691729335,"g":2,"lr":0.003832381952508782,"n":2,"opt":"sgd"} | 0 | clip=0.1754 g=2 lr=0.003832 n=2 opt=sgd seed=0
{"clip":0.2750797007244109,"g":2,"lr":0.0001234665752399724,"n":4,"opt":"sgd","seed":0} | {"clip":0.2750797007244109,"g":2,"lr":0.0001234665752399724,"n":4,"opt":"sgd"} | 0 | clip=0.2751 g=2 lr=0.0001235 n=4 opt=sgd seed=0
`, "\n")
	if got != want {
		t.Errorf("members:\n%s\nwant:\n%s", got, want)
	}
	if again := memberLines(mustParse(t, `{"grid":{"g":[1,2]},"random":{"opt":{"dist":"choice","values":["adam","sgd","rmsprop"]},"n":{"dist":"int","min":1,"max":8},"clip":{"dist":"uniform","min":0.1,"max":0.3},"lr":{"dist":"loguniform","min":1e-5,"max":1e-2}},"samples":2,"seedCount":1,"randomSeed":12345}`).Members()); again != got {
		t.Errorf("the same spec with its random params in another order expands differently:\n%s", again)
	}
}

// TestRandomDistributions draws many samples and checks each distribution's
// range, its ends and its shape roughly.
func TestRandomDistributions(t *testing.T) {
	s := mustParse(t, `{"random":{
		"u":{"dist":"uniform","min":-2,"max":2},
		"l":{"dist":"loguniform","min":1e-6,"max":1},
		"i":{"dist":"int","min":-1,"max":2},
		"c":{"dist":"choice","values":["a",1,[2]]}},"samples":10000}`)
	var uNeg, lSmall int
	ints := map[int64]int{}
	choices := map[string]int{}
	for _, m := range s.Members() {
		var p struct {
			U, L float64
			I    int64
			C    json.RawMessage
		}
		if err := json.Unmarshal(m.Params, &p); err != nil {
			t.Fatalf("member %d params %s: %v", m.Index, m.Params, err)
		}
		if p.U < -2 || p.U > 2 || p.L < 1e-6 || p.L > 1 || p.I < -1 || p.I > 2 {
			t.Fatalf("member %d out of range: %s", m.Index, m.Params)
		}
		if p.U < 0 {
			uNeg++
		}
		if p.L < 1e-3 { // half the decades of [1e-6, 1]
			lSmall++
		}
		ints[p.I]++
		choices[string(p.C)]++
	}
	near := func(what string, got, want int) {
		if math.Abs(float64(got-want)) > 0.05*10000 {
			t.Errorf("%s: %d of 10000 samples, want about %d", what, got, want)
		}
	}
	near("uniform below 0", uNeg, 5000)
	near("loguniform below 1e-3", lSmall, 5000)
	for _, i := range []int64{-1, 0, 1, 2} { // both bounds included
		near(fmt.Sprintf("int %d", i), ints[i], 2500)
	}
	for _, c := range []string{`"a"`, `1`, `[2]`} {
		near("choice "+c, choices[c], 3333)
	}
	if len(ints) != 4 || len(choices) != 3 {
		t.Errorf("values drawn beyond the distributions: ints %v, choices %v", ints, choices)
	}
}

// TestMembersProperties: for any valid spec, Members has Size() members,
// indexed in order, the same on every call; each member's params hold the
// base params, its cell and its seed; a grid-only sweep has one seed group
// per cell with each seed once.
func TestMembersProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		names := rapid.SampledFrom([]string{"a", "b", "lr", "x.y", "n-steps", "seed"})
		spec := map[string]any{}
		baseParams := rapid.MapOf(names, rapid.IntRange(-5, 5)).Draw(t, "base")
		spec["base"] = map[string]any{"params": baseParams}
		grid := rapid.MapOfN(names, rapid.SliceOfNDistinct(rapid.IntRange(0, 20), 1, 4, rapid.ID[int]), 0, 3).Draw(t, "grid")
		spec["grid"] = grid
		random := map[string]any{}
		for _, n := range rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"r1", "r2", "lr2"}), 0, 3, rapid.ID[string]).Draw(t, "random") {
			lo := rapid.IntRange(1, 100).Draw(t, n+".min")
			hi := lo + rapid.IntRange(0, 100).Draw(t, n+".max")
			dist := rapid.SampledFrom([]string{"uniform", "loguniform", "int", "choice"}).Draw(t, n+".dist")
			if dist == "choice" {
				random[n] = map[string]any{"dist": dist, "values": []int{lo, hi + 1}}
			} else {
				random[n] = map[string]any{"dist": dist, "min": lo, "max": hi}
			}
		}
		if len(random) > 0 {
			spec["random"] = random
			spec["samples"] = rapid.IntRange(1, 4).Draw(t, "samples")
		}
		_, seedInGrid := grid["seed"]
		nSeeds := 0
		if !seedInGrid {
			nSeeds = rapid.IntRange(0, 4).Draw(t, "seedCount")
		}
		if nSeeds > 0 {
			spec["seedCount"] = nSeeds
		}
		if len(grid) == 0 && len(random) == 0 && nSeeds == 0 {
			spec["seedCount"], nSeeds = 1, 1
		}
		// A tpe sweep draws its grid's axes with its random params.
		if len(random) > 0 && rapid.Bool().Draw(t, "tpe") {
			spec["method"], spec["budget"] = "tpe", spec["samples"].(int)*max(nSeeds, 1)
			delete(spec, "samples")
		}
		body, _ := json.Marshal(spec)
		s, err := Parse(body)
		if err != nil {
			t.Fatalf("Parse(%s): %v", body, err)
		}
		ms := s.Members()
		if len(ms) != s.Size() {
			t.Fatalf("%d members, Size %d", len(ms), s.Size())
		}
		if again := s.Members(); memberLines(again) != memberLines(ms) {
			t.Fatalf("a second expansion differs")
		}
		if s2, _ := Parse(body); memberLines(s2.Members()) != memberLines(ms) {
			t.Fatalf("a second parse expands differently")
		}
		groups := map[string][]int64{}
		for i, m := range ms {
			if m.Index != i {
				t.Fatalf("member %d has index %d", i, m.Index)
			}
			var p map[string]json.Number
			if err := json.Unmarshal(m.Params, &p); err != nil {
				t.Fatalf("member %d params %s: %v", i, m.Params, err)
			}
			var cell map[string]json.Number
			if err := json.Unmarshal(m.Cell, &cell); err != nil {
				t.Fatalf("member %d cell %s: %v", i, m.Cell, err)
			}
			for k, v := range baseParams {
				_, inCell := cell[k]
				if !inCell && !(k == "seed" && nSeeds > 0) && p[k] != json.Number(fmt.Sprint(v)) {
					t.Fatalf("member %d params %s lose base param %s=%d", i, m.Params, k, v)
				}
			}
			for k, v := range cell {
				if p[k] != v {
					t.Fatalf("member %d params %s lack cell value %s=%s", i, m.Params, k, v)
				}
				if vs, ok := grid[k]; ok && !slices.Contains(vs, mustInt(t, v)) {
					t.Fatalf("member %d: grid value %s=%s not in the grid %v", i, k, v, vs)
				}
			}
			if len(cell) != len(grid)+len(random) {
				t.Fatalf("member %d cell %s: want %d names", i, m.Cell, len(grid)+len(random))
			}
			switch {
			case nSeeds > 0 && (m.Seed == nil || *m.Seed != int64(i%nSeeds) || p["seed"] != json.Number(fmt.Sprint(i%nSeeds))):
				t.Fatalf("member %d: seed %v, params %s; want seed %d", i, m.Seed, m.Params, i%nSeeds)
			case nSeeds == 0 && m.Seed != nil:
				t.Fatalf("member %d has seed %d in a sweep without seeds", i, *m.Seed)
			}
			key, err := GroupKey(m.Params)
			if err != nil {
				t.Fatal(err)
			}
			if m.Seed != nil {
				groups[key] = append(groups[key], *m.Seed)
			}
			// The cell is a point of the space, which proposes it again.
			x, err := s.Point(m.Cell)
			if err != nil {
				t.Fatalf("member %d: Point(%s): %v", i, m.Cell, err)
			}
			seedAt := i % max(nSeeds, 1)
			prop, err := s.Proposal(x, i-seedAt)
			if err != nil {
				t.Fatalf("member %d: Proposal(%v): %v", i, x, err)
			}
			if again := prop[seedAt]; again.Index != i || string(again.Cell) != string(m.Cell) || string(again.Params) != string(m.Params) {
				t.Fatalf("member %d %s proposed again as %d %s", i, m.Params, again.Index, again.Params)
			}
		}
		if len(random) == 0 && nSeeds > 0 {
			if len(groups) != s.Cells() {
				t.Fatalf("%d seed groups, want one per cell (%d)", len(groups), s.Cells())
			}
			for key, seeds := range groups {
				if len(seeds) != nSeeds {
					t.Fatalf("group %s has seeds %v, want each of %d once", key, seeds, nSeeds)
				}
			}
		}
	})
}

func mustInt(t *rapid.T, n json.Number) int {
	i, err := n.Int64()
	if err != nil {
		t.Fatalf("%s is not an integer", n)
	}
	return int(i)
}

func TestShortNumber(t *testing.T) {
	for in, want := range map[string]string{
		"0.00021056337053284956": "0.0002106", "3e-4": "3e-4", "0.99": "0.99", "128": "128",
		"123456789": "123456789", "1.23456e-7": "1.235e-07", "-2.5": "-2.5", "0.100000": "0.100000",
		"31415.9265": "3.142e+04", `"x"`: `"x"`,
	} {
		if got := ShortNumber([]byte(in)); got != want {
			t.Errorf("ShortNumber(%s) = %s, want %s", in, got, want)
		}
	}
}
