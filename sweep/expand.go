package sweep

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// pcgStream is the second word of the PCG generator's seed: a constant, so
// the draws depend on RandomSeed alone. math/rand/v2's sequences for a seed
// are pinned by Go's own regression test (regress_test.go), so a sweep
// expands the same across Go releases; TestMembersRandomGolden pins ours.
const pcgStream = 0x7377656570 // "sweep"

// Member is one run of a sweep.
type Member struct {
	// Index is the member's place in the sweep's order, from 0.
	Index int
	// Cell is the member's grid and random values as a compact JSON object,
	// names sorted.
	Cell json.RawMessage
	// Seed is the member's seed, nil when the sweep gives no seeds.
	Seed *int64
	// Params is what the member's run is submitted with: base.params in
	// their order, each grid, random and seed value written over the base
	// value of the same name or, when base has none, appended (cell names
	// sorted, seed last). The order is the order of the run's "--key value"
	// flags.
	Params json.RawMessage
	// Label names the member briefly, as flags are written:
	// "gamma=0.99 lr=0.001 seed=3".
	Label string
}

// Members expands the spec into its Size() members, always the same ones in
// the same order: grid cells in lexicographic order of the grid's names
// sorted (the first name varies slowest, each name's values in the order
// given), the random samples of a cell next, the seeds innermost. The i-th
// member has cell i / len(Seeds) and seed Seeds[i % len(Seeds)]. Every cell
// gets the same random samples. A tpe sweep has no grid cells: its Budget
// members are its samples × seeds, the grid's axes drawn with the random
// params.
func (s *Spec) Members() []Member {
	samples := s.draw()
	out := make([]Member, 0, s.Size())
	for _, gc := range s.gridCells() {
		for _, sample := range samples {
			out = s.appendCell(out, mergeSorted(gc, sample))
		}
	}
	return out
}

// appendCell appends cell's members, one per seed (one without seeds),
// numbered on from len(out).
func (s *Spec) appendCell(out []Member, cell []kv) []Member {
	cellJSON := appendObject(nil, cell)
	label := labelOf(cell)
	if s.Seeds == nil {
		return append(out, Member{
			Index: len(out), Cell: cellJSON, Params: s.params(cell, nil), Label: label,
		})
	}
	for _, seed := range s.Seeds {
		l := SeedParam + "=" + strconv.FormatInt(seed, 10)
		if label != "" {
			l = label + " " + l
		}
		out = append(out, Member{
			Index: len(out), Cell: cellJSON, Seed: &seed, Params: s.params(cell, &seed), Label: l,
		})
	}
	return out
}

// gridCells lists the grid's cells, each sorted by name (the axes are). A
// tpe sweep has one empty cell: its grid's axes are drawn (see searched).
func (s *Spec) gridCells() [][]kv {
	cells := [][]kv{{}}
	if s.Method == TPE {
		return cells
	}
	for _, a := range s.grid {
		next := make([][]kv, 0, len(cells)*len(a.values))
		for _, c := range cells {
			for _, v := range a.values {
				next = append(next, append(append(make([]kv, 0, len(c)+1), c...), kv{a.name, v}))
			}
		}
		cells = next
	}
	return cells
}

// searched is the params the samples draw, sorted by name: the random
// params and, in a tpe sweep, the grid's axes as choices (Members' random
// expansion of a tpe sweep; its members are Initial's and Suggest's).
func (s *Spec) searched() []randomParam {
	if s.Method != TPE {
		return s.random
	}
	return s.swept()
}

// swept is every param a member's cell holds, sorted by name: the random
// params and the grid's axes as choices.
func (s *Spec) swept() []randomParam {
	if len(s.grid) == 0 {
		return s.random
	}
	ps := slices.Clone(s.random)
	for _, a := range s.grid {
		ps = append(ps, randomParam{name: a.name, dist: Choice, values: a.values})
	}
	slices.SortFunc(ps, func(a, b randomParam) int { return strings.Compare(a.name, b.name) })
	return ps
}

// draw makes the random samples, each sorted by name: sample by sample,
// each param in name order, from one generator seeded with RandomSeed.
// Without random params it is one empty sample.
func (s *Spec) draw() [][]kv {
	params := s.searched()
	if len(params) == 0 {
		return [][]kv{{}}
	}
	rng := rand.New(rand.NewPCG(s.RandomSeed, pcgStream))
	out := make([][]kv, s.samples)
	for i := range out {
		sample := make([]kv, len(params))
		for j, p := range params {
			sample[j] = kv{p.name, p.draw(rng)}
		}
		out[i] = sample
	}
	return out
}

func (p *randomParam) draw(rng *rand.Rand) json.RawMessage {
	switch p.dist {
	case Choice:
		return p.values[rng.IntN(len(p.values))]
	case Int:
		lo, hi := int64(p.min), int64(p.max)
		return strconv.AppendInt(nil, lo+rng.Int64N(hi-lo+1), 10)
	case LogUniform:
		u := rng.Float64()
		lmin, lmax := math.Log(p.min), math.Log(p.max)
		v := math.Exp(lmin*(1-u) + lmax*u)
		return formatFloat(min(max(v, p.min), p.max)) // exp may round past a bound
	default: // Uniform; Parse admits no other
		u := rng.Float64()
		// min*(1-u) + max*u, not min + (max-min)*u: max-min may overflow.
		return formatFloat(min(max(p.min*(1-u)+p.max*u, p.min), p.max))
	}
}

func formatFloat(v float64) json.RawMessage {
	return strconv.AppendFloat(nil, v, 'g', -1, 64)
}

// mergeSorted merges two name-sorted lists whose names are distinct.
func mergeSorted(a, b []kv) []kv {
	out := make([]kv, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].key < b[0].key {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// params is base.params overwritten by cell, then by the seed.
func (s *Spec) params(cell []kv, seed *int64) json.RawMessage {
	kvs := append(make([]kv, 0, len(s.baseParams)+len(cell)+1), s.baseParams...)
	set := func(key string, val json.RawMessage) {
		for i := range kvs {
			if kvs[i].key == key {
				kvs[i].val = val
				return
			}
		}
		kvs = append(kvs, kv{key, val})
	}
	for _, e := range cell {
		set(e.key, e.val)
	}
	if seed != nil {
		set(SeedParam, strconv.AppendInt(nil, *seed, 10))
	}
	return appendObject(nil, kvs)
}

// labelOf writes a cell as "name=value ...", a string value as it is and
// any other as its JSON text, as the run's flags show them.
func labelOf(cell []kv) string {
	var b strings.Builder
	for i, e := range cell {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(e.key)
		b.WriteByte('=')
		var str string
		if e.val[0] == '"' && json.Unmarshal(e.val, &str) == nil {
			b.WriteString(str)
		} else {
			b.WriteString(ShortNumber(e.val))
		}
	}
	return b.String()
}

// ShortNumber writes a JSON number of more than 4 significant digits with
// a fraction or an exponent to 4 ("lr=0.0002106", not
// "lr=0.00021056337053284956"), for names and tables; the params keep every
// digit. Anything else (3e-4, 0.99, 128) is returned as written.
func ShortNumber(v json.RawMessage) string {
	if !bytes.ContainsAny(v, ".eE") {
		return string(v)
	}
	mant, _, _ := bytes.Cut(bytes.ToLower(v), []byte("e"))
	digits := bytes.Trim(bytes.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, mant), "0")
	if len(digits) <= 4 {
		return string(v)
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return string(v)
	}
	return strconv.FormatFloat(f, 'g', 4, 64)
}
