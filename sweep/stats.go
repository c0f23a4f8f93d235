package sweep

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/rlsched/rlsched/core"
)

// Run is what Summarize reads of a member's run. Pass one Run per member:
// its latest run (a retry's, once retried), so a failed attempt and its
// retry do not both count.
type Run struct {
	ID          string
	Params      json.RawMessage // the Task's params
	Status      core.Status
	FinalReward *float64
	// Reason is the Task's reason (core.ReasonEarlyStopped: stopped by the
	// sweep's early stopping), read by Outcomes.
	Reason string
	// Series is one metric of the run as [step, value] pairs (a store's
	// Metrics answer), or nil when no curves are wanted.
	Series [][2]float64
}

// Group is the runs of one seed group: those whose params are equal once
// the seed is left out. Its JSON form is API.md's group.
type Group struct {
	// Key is the canonical JSON of Params, the group's identity.
	Key string `json:"-"`
	// Params are the group's params without the seed.
	Params json.RawMessage `json:"params"`
	// Runs are the group's run ids, in input order.
	Runs []string `json:"runs"`
	// N counts the runs with a final reward.
	N int `json:"n"`
	// FinalReward summarises the final rewards; nil when N is 0.
	FinalReward *Summary `json:"finalReward"`
	// Counts counts the runs by status.
	Counts map[core.Status]int `json:"counts"`
	// Series is the step-aligned mean ± std of the runs' Series, in step
	// order (bucketed when they do not share steps, see curve); empty when
	// no run has a point.
	Series []Point `json:"series,omitempty"`
}

// Summary is the mean, sample standard deviation (n−1 in the denominator;
// 0 for a single value), minimum and maximum of values. A figure too large
// for float64 (a sum of huge rewards) is written as JSON null.
type Summary struct {
	Mean float64 `json:"mean"`
	Std  float64 `json:"std"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

// MarshalJSON writes {"mean","std","min","max"}.
func (s Summary) MarshalJSON() ([]byte, error) {
	b := appendFloat(append([]byte(nil), `{"mean":`...), s.Mean)
	b = appendFloat(append(b, `,"std":`...), s.Std)
	b = appendFloat(append(b, `,"min":`...), s.Min)
	b = appendFloat(append(b, `,"max":`...), s.Max)
	return append(b, '}'), nil
}

// Point is one point of a group's curve: the mean and sample standard
// deviation of the values the N runs that logged this step (or in this
// bucket, see curve) logged at it, and the least and greatest of them, so
// a chart clips its mean ± std band to what the runs reached (issue 30).
type Point struct {
	Step float64
	Mean float64
	Std  float64
	N    int
	Min  float64
	Max  float64
}

// MarshalJSON writes API.md's [step, mean, std, n] and then min, max.
func (p Point) MarshalJSON() ([]byte, error) { return p.AppendJSON(nil), nil }

// AppendJSON appends MarshalJSON's text to b: a curve of many points is
// written without a call of encoding/json per point (which also re-reads
// each one's output), a third of the time of a sweep's curves answer.
func (p Point) AppendJSON(b []byte) []byte {
	b = append(appendStep(append(b, '['), p.Step), ',')
	b = append(appendFloat(b, p.Mean), ',')
	b = append(appendFloat(b, p.Std), ',')
	b = append(strconv.AppendInt(b, int64(p.N), 10), ',')
	b = append(appendFloat(b, p.Min), ',')
	return append(appendFloat(b, p.Max), ']')
}

// appendStep writes a step, an integer unless the curve is bucketed, as
// appendFloat does, the integer case without the float formatter.
func appendStep(b []byte, f float64) []byte {
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.AppendInt(b, int64(f), 10)
	}
	return appendFloat(b, f)
}

// appendFloat writes f as JSON: null when it is not finite, which JSON
// cannot write.
func appendFloat(b []byte, f float64) []byte {
	if !finite(f) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

// GroupKey is the group of a run with these params: the canonical JSON of
// the params object without its seed (absent or null params are {}).
func GroupKey(params json.RawMessage) (string, error) {
	if isNull(params) {
		return "{}", nil
	}
	if json.Valid(params) {
		if key, ok := flatKey(params, SeedParam); ok {
			return key, nil
		}
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return "", fmt.Errorf("params must be a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", fmt.Errorf("params must be one JSON object")
	}
	delete(obj, SeedParam)
	return string(appendCanonical(nil, obj)), nil
}

// Summarize groups runs by GroupKey and summarises each group: final
// rewards (non-finite ones count as none), status counts and curves of at
// most maxPoints points (DefaultMaxPoints when maxPoints ≤ 0). Groups come
// sorted by mean final reward, highest first, those without a final reward
// last, ties by Key. It fails only on params that are not a JSON object,
// which the API never stores.
//
// Curves align runs on exact steps when they log at the same steps: a
// step's point covers the runs that logged that step, and its N says how
// many. A run that logged a step more than once counts with its last finite
// value; non-finite points are left out. Runs that log at steps of their
// own, or more than maxPoints steps, are bucketed instead (see curve).
func Summarize(runs []Run, maxPoints int) ([]Group, error) {
	return SummarizeSplit(runs, maxPoints, func(n, _ int, f func(lo, hi int)) { f(0, n) })
}

// SummarizeSplit is Summarize with the groups' statistics and curves
// computed by split: it must call f on ranges [lo, hi) that cover 0..n
// once each, in any order or at once (the groups are independent), and
// return after the last; work is the points to add, for split to judge
// whether splitting pays. The package starts no goroutine itself.
func SummarizeSplit(runs []Run, maxPoints int, split func(n, work int, f func(lo, hi int))) ([]Group, error) {
	if maxPoints <= 0 {
		maxPoints = DefaultMaxPoints
	}
	type acc struct {
		g       Group
		rewards []float64
		series  [][][2]float64
		curve   curve
	}
	byKey := map[string]*acc{}
	var order []*acc
	total := 0
	for _, r := range runs {
		key, err := GroupKey(r.Params)
		if err != nil {
			return nil, fmt.Errorf("cannot group run %s: %w", r.ID, err)
		}
		a := byKey[key]
		if a == nil {
			a = &acc{g: Group{Key: key, Params: json.RawMessage(key), Counts: map[core.Status]int{}}}
			a.curve.maxPoints = maxPoints
			byKey[key] = a
			order = append(order, a)
		}
		a.g.Runs = append(a.g.Runs, r.ID)
		a.g.Counts[r.Status]++
		if f := r.FinalReward; f != nil && finite(*f) {
			a.rewards = append(a.rewards, *f)
		}
		if len(r.Series) > 0 {
			a.series = append(a.series, r.Series)
			total += len(r.Series)
		}
	}
	// Each group's curve is its own: split may compute ranges of groups at
	// once (SummarizeSplit), each group's series added in run order.
	out := make([]Group, len(order))
	split(len(order), total, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a := order[i]
			for _, s := range a.series {
				a.curve.add(s)
			}
			a.g.N = len(a.rewards)
			a.g.FinalReward = summarize(a.rewards)
			a.g.Series = a.curve.points()
			out[i] = a.g
		}
	})
	slices.SortFunc(out, func(a, b Group) int {
		switch {
		case a.FinalReward == nil && b.FinalReward == nil:
		case a.FinalReward == nil:
			return 1
		case b.FinalReward == nil:
			return -1
		default:
			if c := cmp.Compare(b.FinalReward.Mean, a.FinalReward.Mean); c != 0 {
				return c
			}
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return out, nil
}

// summarize is nil for no values. Two passes: the mean first, then the
// squared deviations from it, which keeps the std exact for values with a
// large common offset.
func summarize(xs []float64) *Summary {
	if len(xs) == 0 {
		return nil
	}
	s := Summary{Min: xs[0], Max: xs[0]}
	sum := 0.0
	for _, x := range xs {
		sum += x
		s.Min, s.Max = min(s.Min, x), max(s.Max, x)
	}
	s.Mean = sum / float64(len(xs))
	if len(xs) > 1 {
		ss := 0.0
		for _, x := range xs {
			ss += (x - s.Mean) * (x - s.Mean)
		}
		s.Std = math.Sqrt(ss / float64(len(xs)-1))
	}
	return &s
}
