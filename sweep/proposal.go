package sweep

import (
	"github.com/rlsched/rlsched/internal/clip"

	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/rlsched/rlsched/sweep/tpe"
)

// Space is every param a member's cell holds, in name order, as sweep/tpe's
// search space: uniform, loguniform and int params as they are, a choice
// param and a grid axis as a categorical of its values in the order given
// (and so a categorical feature for sweep/importance, over Point's values).
func (s *Spec) Space() tpe.Space {
	ps := s.swept()
	out := make(tpe.Space, len(ps))
	for i, p := range ps {
		out[i] = tpe.Param{Name: p.name, Min: p.min, Max: p.max}
		switch p.dist {
		case Uniform:
			out[i].Kind = tpe.Uniform
		case LogUniform:
			out[i].Kind = tpe.LogUniform
		case Int:
			out[i].Kind = tpe.Int
		default: // Choice; Parse admits no other
			out[i] = tpe.Param{Name: p.name, Kind: tpe.Categorical, N: len(p.values)}
		}
	}
	return out
}

// Proposal is the members that run point x of Space, one per seed,
// numbered from index: what a tpe sweep submits for each suggestion.
func (s *Spec) Proposal(x []float64, index int) ([]Member, error) {
	ps, space := s.swept(), s.Space()
	if len(x) != len(space) {
		return nil, fmt.Errorf("cannot propose %d values for a space of %d params", len(x), len(space))
	}
	cell := make([]kv, len(ps))
	for i, p := range ps {
		if !space[i].Contains(x[i]) {
			return nil, fmt.Errorf("cannot propose %s = %v: outside the space", p.name, x[i])
		}
		var v json.RawMessage
		switch p.dist {
		case Choice:
			v = p.values[int(x[i])]
		case Int:
			v = strconv.AppendInt(nil, int64(x[i]), 10)
		default:
			v = formatFloat(x[i])
		}
		cell[i] = kv{p.name, v}
	}
	out := s.appendCell(nil, cell)
	for i := range out {
		out[i].Index += index
	}
	return out, nil
}

// Point reads a member's Cell back as a point of Space, so a sweep's trials
// can be rebuilt from its members.
func (s *Spec) Point(cell json.RawMessage) ([]float64, error) {
	kvs, err := objectOf(cell)
	if err != nil {
		return nil, fmt.Errorf("cannot read cell %s: %w", clip.String(string(cell), 64), err)
	}
	vals := make(map[string]json.RawMessage, len(kvs))
	for _, e := range kvs {
		vals[e.key] = e.val
	}
	ps := s.swept()
	out := make([]float64, len(ps))
	for i, p := range ps {
		v, ok := vals[p.name]
		if !ok {
			return nil, fmt.Errorf("cannot read cell: it lacks %s", p.name)
		}
		if out[i], err = p.point(v); err != nil {
			return nil, fmt.Errorf("cannot read cell: %s: %w", p.name, err)
		}
	}
	return out, nil
}

// point is v as a value of p: its index among a choice's values, else the
// number, which must lie in p's range.
func (p *randomParam) point(v json.RawMessage) (float64, error) {
	if p.dist == Choice {
		c, err := canonical(v)
		if err != nil {
			return 0, err
		}
		for i, w := range p.values {
			if cw, _ := canonical(w); string(cw) == string(c) { // validated by Parse
				return float64(i), nil
			}
		}
		return 0, fmt.Errorf("%s is not one of its values", clip.String(string(v), 64))
	}
	var f float64
	if json.Unmarshal(v, &f) != nil || f < p.min || f > p.max || p.dist == Int && f != math.Trunc(f) {
		return 0, fmt.Errorf("%s is not a value of its %s range [%v, %v]", clip.String(string(v), 64), p.dist, p.min, p.max)
	}
	return f, nil
}
