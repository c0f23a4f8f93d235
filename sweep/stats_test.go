package sweep

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/rlsched/rlsched/core"
)

func ptr(f float64) *float64 { return &f }

func TestSummarize(t *testing.T) {
	nan := math.NaN()
	runs := []Run{
		{ID: "a1", Params: json.RawMessage(`{"lr":0.1,"seed":0}`), Status: core.StatusSucceeded, FinalReward: ptr(1),
			Series: [][2]float64{{1, 1}, {2, 2}, {3, 3}}},
		{ID: "b1", Params: json.RawMessage(`{"lr":0.2,"seed":0}`), Status: core.StatusSucceeded, FinalReward: ptr(10),
			// Unsorted, step 2 twice (the last value counts), a NaN step and a NaN value.
			Series: [][2]float64{{2, 1}, {1, 0}, {2, 3}, {nan, 5}, {3, nan}}},
		// Same group as a1: names in another order, 1e-1 for 0.1.
		{ID: "a2", Params: json.RawMessage(`{"seed":1, "lr":1e-1}`), Status: core.StatusSucceeded, FinalReward: ptr(3),
			Series: [][2]float64{{2, 4}, {3, 5}, {4, 6}}},
		{ID: "a3", Params: json.RawMessage(`{"lr":0.1,"seed":2}`), Status: core.StatusFailed},
		{ID: "c1", Params: json.RawMessage(`{"lr":0.3}`), Status: core.StatusRunning},
		{ID: "d1", Params: json.RawMessage(`{"lr":0.4,"seed":0}`), Status: core.StatusSucceeded, FinalReward: ptr(math.Inf(1))},
		{ID: "e1", Params: nil, Status: core.StatusSucceeded, FinalReward: ptr(2)},
	}
	groups, err := Summarize(runs, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, g := range groups {
		line, err := json.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
		if g.Key != string(g.Params) {
			t.Errorf("group key %q differs from its params %s", g.Key, g.Params)
		}
	}
	// Sorted by mean final reward (the tie of 2 broken by key), groups
	// without a final reward last.
	want := strings.TrimLeft(`
{"params":{"lr":0.2},"runs":["b1"],"n":1,"finalReward":{"mean":10,"std":0,"min":10,"max":10},"counts":{"SUCCEEDED":1},"series":[[1,0,0,1,0,0],[2,3,0,1,3,3]]}
{"params":{"lr":0.1},"runs":["a1","a2","a3"],"n":2,"finalReward":{"mean":2,"std":1.4142135623730951,"min":1,"max":3},"counts":{"FAILED":1,"SUCCEEDED":2},"series":[[1,1,0,1,1,1],[2,3,1.4142135623730951,2,2,4],[3,4,1.4142135623730951,2,3,5],[4,6,0,1,6,6]]}
{"params":{},"runs":["e1"],"n":1,"finalReward":{"mean":2,"std":0,"min":2,"max":2},"counts":{"SUCCEEDED":1}}
{"params":{"lr":0.3},"runs":["c1"],"n":0,"finalReward":null,"counts":{"RUNNING":1}}
{"params":{"lr":0.4},"runs":["d1"],"n":0,"finalReward":null,"counts":{"SUCCEEDED":1}}
`, "\n")
	if got := b.String(); got != want {
		t.Errorf("groups:\n%s\nwant:\n%s", got, want)
	}
	if runs[1].Series[0] != [2]float64{2, 1} {
		t.Errorf("Summarize reordered its input series: %v", runs[1].Series)
	}

	if _, err := Summarize([]Run{{ID: "x", Params: json.RawMessage(`[1]`)}}, 0); err == nil || !strings.Contains(err.Error(), "run x") {
		t.Errorf("params not an object: %v, want an error naming the run", err)
	}
	if gs, err := Summarize(nil, 0); err != nil || len(gs) != 0 {
		t.Errorf("no runs: %v %v", gs, err)
	}
}

// TestSummarizeBuckets: past maxPoints distinct steps a group's curve is
// bucketed; each run gives a bucket the mean of its values in it.
func TestSummarizeBuckets(t *testing.T) {
	runs := []Run{
		{ID: "a", Params: json.RawMessage(`{"seed":1}`), Series: [][2]float64{{0, 1}, {1, 3}, {2, 5}, {3, 7}}},
		{ID: "b", Params: json.RawMessage(`{"seed":2}`), Series: [][2]float64{{0, 2}, {3, 4}}},
	}
	// Steps 0..3 in 2 buckets: [0, 1.5) and [1.5, 3].
	groups, err := Summarize(runs, 2)
	if err != nil || len(groups) != 1 {
		t.Fatalf("%v %v", groups, err)
	}
	got, _ := json.Marshal(groups[0].Series)
	// Bucket 0: a's mean (1+3)/2 = 2 and b's 2, at the mean step (0+1+0)/3;
	// bucket 1: a's (5+7)/2 = 6 and b's 4, at (2+3+3)/3.
	if want := `[[0.3333333333333333,2,0,2,2,2],[2.6666666666666665,5,1.4142135623730951,2,4,6]]`; string(got) != want {
		t.Errorf("bucketed series %s, want %s", got, want)
	}
	// With room for every step, the same runs align exactly.
	groups, _ = Summarize(runs, 4)
	got, _ = json.Marshal(groups[0].Series)
	if want := `[[0,1.5,0.7071067811865476,2,1,2],[1,3,0,1,3,3],[2,5,0,1,5,5],[3,5.5,2.1213203435596424,2,4,7]]`; string(got) != want {
		t.Errorf("exact series %s, want %s", got, want)
	}
	// Runs logging at steps of their own (each step logged by one run) are
	// bucketed even with room for every step: as many buckets as the
	// longest run has points.
	interleaved := []Run{
		{ID: "a", Params: json.RawMessage(`{"seed":1}`), Series: [][2]float64{{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
		{ID: "b", Params: json.RawMessage(`{"seed":2}`), Series: [][2]float64{{1, 2}, {3, 4}, {5, 6}, {7, 8}}},
	}
	groups, _ = Summarize(interleaved, 0)
	got, _ = json.Marshal(groups[0].Series)
	if want := `[[0.5,1.5,0.7071067811865476,2,1,2],[2.5,3.5,0.7071067811865476,2,3,4],[4.5,5.5,0.7071067811865476,2,5,6],[6.5,7.5,0.7071067811865476,2,7,8]]`; string(got) != want {
		t.Errorf("interleaved series %s, want %s", got, want)
	}
	// Values too large to average in float64 are written as null, never
	// as text JSON cannot parse.
	big := []Run{
		{ID: "x", Params: json.RawMessage(`{"seed":1}`), FinalReward: ptr(math.MaxFloat64), Series: [][2]float64{{1, math.MaxFloat64}}},
		{ID: "y", Params: json.RawMessage(`{"seed":2}`), FinalReward: ptr(math.MaxFloat64), Series: [][2]float64{{1, -math.MaxFloat64}}},
	}
	groups, _ = Summarize(big, 0)
	if got, err := json.Marshal(groups); err != nil || !json.Valid(got) || !strings.Contains(string(got), `"mean":null`) {
		t.Errorf("huge values: %s %v", got, err)
	}
	// Steps at the ends of float64's range do not overflow the bucketing.
	huge := []Run{{ID: "h", Series: [][2]float64{{-math.MaxFloat64, 1}, {0, 2}, {math.MaxFloat64, 3}}}}
	if groups, err := Summarize(huge, 2); err != nil || len(groups[0].Series) != 2 {
		t.Errorf("huge steps: %+v %v", groups, err)
	}
}

func TestGroupKey(t *testing.T) {
	f := func(params, want string) {
		t.Helper()
		got, err := GroupKey(json.RawMessage(params))
		if err != nil || got != want {
			t.Errorf("GroupKey(%s) = %q, %v; want %q", params, got, err, want)
		}
	}
	f(``, `{}`)
	f(`null`, `{}`)
	f(`{}`, `{}`)
	f(`{"seed":4}`, `{}`)
	f(`{"b":1,"a":2,"seed":3}`, `{"a":2,"b":1}`)
	f(`{"lr":1e-3,"x":1.0,"y":-0.0,"z":1E2,"big":123456789012345678901234567890}`,
		`{"big":123456789012345678901234567890,"lr":0.001,"x":1,"y":0,"z":100}`)
	f(`{"o":{"z":1,"a":[true,null,"s"]},"s":"<é\u2028\n>"}`, `{"o":{"a":[true,null,"s"],"z":1},"s":"<é\u2028\n>"}`)
	for _, bad := range []string{`[1]`, `1`, `"s"`, `{"a":1}{}`, `{"a":`} {
		if _, err := GroupKey(json.RawMessage(bad)); err == nil {
			t.Errorf("GroupKey(%s): no error", bad)
		}
	}
}

// naiveGroups is the definition Summarize must agree with, written the
// slow obvious way: per group the two-pass mean and sample std of the final
// rewards, and per step of the last finite value each run logged at it or,
// for runs logging at steps of their own, per bucket of each run's mean in it.
func naiveGroups(runs []Run, maxPoints int) map[string]Group {
	out := map[string]Group{}
	rewards := map[string][]float64{}
	perRun := map[string][]map[float64]float64{} // group → each run's step → value
	for _, r := range runs {
		key, _ := GroupKey(r.Params)
		g := out[key]
		g.Key = key
		g.Runs = append(g.Runs, r.ID)
		if g.Counts == nil {
			g.Counts = map[core.Status]int{}
		}
		g.Counts[r.Status]++
		out[key] = g
		if r.FinalReward != nil && !math.IsNaN(*r.FinalReward) && !math.IsInf(*r.FinalReward, 0) {
			rewards[key] = append(rewards[key], *r.FinalReward)
		}
		last := map[float64]float64{}
		for _, p := range r.Series {
			if finite(p[0]) && finite(p[1]) {
				last[p[0]] = p[1]
			}
		}
		if len(last) > 0 {
			perRun[key] = append(perRun[key], last)
		}
	}
	meanStd := func(xs []float64) (float64, float64) {
		m := 0.0
		for _, x := range xs {
			m += x
		}
		m /= float64(len(xs))
		if len(xs) < 2 {
			return m, 0
		}
		ss := 0.0
		for _, x := range xs {
			ss += (x - m) * (x - m)
		}
		return m, math.Sqrt(ss / float64(len(xs)-1))
	}
	for key, g := range out {
		if xs := rewards[key]; len(xs) > 0 {
			m, s := meanStd(xs)
			g.FinalReward = &Summary{Mean: m, Std: s, Min: slices.Min(xs), Max: slices.Max(xs)}
			g.N = len(xs)
		}
		union := map[float64]bool{}
		for _, run := range perRun[key] {
			for s := range run {
				union[s] = true
			}
		}
		var steps []float64
		for s := range union {
			steps = append(steps, s)
		}
		slices.Sort(steps)
		longest, total := 0, 0
		for _, run := range perRun[key] {
			longest = max(longest, len(run))
			total += len(run)
		}
		perStep := float64(total) / float64(len(steps))
		if len(steps) <= maxPoints && (len(perRun[key]) < 2 || perStep >= 1.5) {
			for _, s := range steps {
				var vs []float64
				for _, run := range perRun[key] {
					if v, ok := run[s]; ok {
						vs = append(vs, v)
					}
				}
				m, sd := meanStd(vs)
				g.Series = append(g.Series, Point{Step: s, Mean: m, Std: sd, N: len(vs), Min: slices.Min(vs), Max: slices.Max(vs)})
			}
		} else {
			n := min(longest, maxPoints)
			lo, hi := steps[0], steps[len(steps)-1]
			bucketOf := func(s float64) int {
				return min(max(int((s/2-lo/2)/(hi/2-lo/2)*float64(n)), 0), n-1)
			}
			values := make([][]float64, n)
			stepsIn := make([][]float64, n)
			for _, run := range perRun[key] {
				mine := make([][]float64, n)
				for s, v := range run {
					mine[bucketOf(s)] = append(mine[bucketOf(s)], v)
					stepsIn[bucketOf(s)] = append(stepsIn[bucketOf(s)], s)
				}
				for b, vs := range mine {
					if len(vs) > 0 {
						m, _ := meanStd(vs)
						values[b] = append(values[b], m)
					}
				}
			}
			for b, vs := range values {
				if len(vs) > 0 {
					m, sd := meanStd(vs)
					at, _ := meanStd(stepsIn[b])
					g.Series = append(g.Series, Point{Step: at, Mean: m, Std: sd, N: len(vs), Min: slices.Min(vs), Max: slices.Max(vs)})
				}
			}
		}
		out[key] = g
	}
	return out
}

func approxEqual(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// TestSummarizeProperties: Summarize agrees with naiveGroups on any runs
// (any statuses, missing and non-finite rewards, series unsorted, with
// repeated steps and steps other runs lack), and its order is by mean
// final reward.
func TestSummarizeProperties(t *testing.T) {
	statuses := []core.Status{core.StatusQueued, core.StatusRunning, core.StatusSucceeded, core.StatusFailed, core.StatusCancelled, core.StatusTimeout}
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 30).Draw(t, "runs")
		runs := make([]Run, n)
		for i := range runs {
			r := Run{
				ID:     fmt.Sprintf("r%d", i),
				Params: json.RawMessage(fmt.Sprintf(`{"g":%d,"seed":%d}`, rapid.IntRange(0, 3).Draw(t, "g"), i)),
				Status: rapid.SampledFrom(statuses).Draw(t, "status"),
			}
			switch rapid.IntRange(0, 5).Draw(t, "reward kind") {
			case 0:
			case 1:
				r.FinalReward = ptr(math.NaN())
			default:
				r.FinalReward = ptr(rapid.Float64Range(-1e3, 1e3).Draw(t, "reward"))
			}
			for range rapid.IntRange(0, 12).Draw(t, "points") {
				r.Series = append(r.Series, [2]float64{
					float64(rapid.IntRange(0, 15).Draw(t, "step")),
					rapid.Float64Range(-100, 100).Draw(t, "value"),
				})
			}
			if rapid.Bool().Draw(t, "sorted") {
				slices.SortFunc(r.Series, func(a, b [2]float64) int { return int(a[0] - b[0]) })
			}
			runs[i] = r
		}
		maxPoints := rapid.IntRange(1, 12).Draw(t, "maxPoints")
		groups, err := Summarize(runs, maxPoints)
		if err != nil {
			t.Fatal(err)
		}
		want := naiveGroups(runs, maxPoints)
		if len(groups) != len(want) {
			t.Fatalf("%d groups, want %d", len(groups), len(want))
		}
		for i, g := range groups {
			w := want[g.Key]
			if !slices.Equal(g.Runs, w.Runs) || g.N != w.N || fmt.Sprint(g.Counts) != fmt.Sprint(w.Counts) {
				t.Fatalf("group %s: runs %v n %d counts %v; want %v %d %v", g.Key, g.Runs, g.N, g.Counts, w.Runs, w.N, w.Counts)
			}
			if (g.FinalReward == nil) != (w.FinalReward == nil) {
				t.Fatalf("group %s: final reward %v, want %v", g.Key, g.FinalReward, w.FinalReward)
			}
			if f, wf := g.FinalReward, w.FinalReward; f != nil && !(approxEqual(f.Mean, wf.Mean) && approxEqual(f.Std, wf.Std) && f.Min == wf.Min && f.Max == wf.Max) {
				t.Fatalf("group %s: final reward %+v, want %+v", g.Key, *f, *wf)
			}
			if len(g.Series) != len(w.Series) {
				t.Fatalf("group %s: series %v, want %v", g.Key, g.Series, w.Series)
			}
			for j, p := range g.Series {
				q := w.Series[j]
				if !approxEqual(p.Step, q.Step) || p.N != q.N || !approxEqual(p.Mean, q.Mean) || !approxEqual(p.Std, q.Std) {
					t.Fatalf("group %s step %v: %+v, want %+v", g.Key, p.Step, p, q)
				}
			}
			if i > 0 {
				prev := groups[i-1]
				switch {
				case prev.FinalReward == nil && g.FinalReward != nil:
					t.Fatalf("group %s without a reward sorts before %s", prev.Key, g.Key)
				case prev.FinalReward != nil && g.FinalReward != nil && prev.FinalReward.Mean < g.FinalReward.Mean:
					t.Fatalf("group %s (mean %v) sorts before %s (mean %v)", prev.Key, prev.FinalReward.Mean, g.Key, g.FinalReward.Mean)
				}
			}
		}
	})
}

// benchRuns is the target load: 10,000 runs (1,000 cells × 10
// seeds) of 500 points each.
func benchRuns() []Run {
	const cells, seeds, points = 1000, 10, 500
	runs := make([]Run, 0, cells*seeds)
	for c := range cells {
		for s := range seeds {
			series := make([][2]float64, points)
			for p := range series {
				series[p] = [2]float64{float64(p * 10), float64(c) + float64(s*p%97)}
			}
			runs = append(runs, Run{
				ID:          fmt.Sprintf("r%05d", len(runs)),
				Params:      json.RawMessage(fmt.Sprintf(`{"gamma":0.99,"lr":%g,"n_steps":%d,"seed":%d}`, 1e-4*float64(c%100+1), 128<<(c/100), s)),
				Status:      core.StatusSucceeded,
				FinalReward: ptr(float64(c) + float64(s)/10),
				Series:      series,
			})
		}
	}
	return runs
}

func BenchmarkSummarize(b *testing.B) {
	runs := benchRuns()
	points := 0
	for _, r := range runs {
		points += len(r.Series)
	}
	b.SetBytes(int64(points) * 16)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		groups, err := Summarize(runs, 0)
		if err != nil || len(groups) != 1000 || groups[0].N != 10 || len(groups[0].Series) != 500 {
			b.Fatalf("%d groups, %v", len(groups), err)
		}
	}
}

// BenchmarkSummarizeUnaligned is the worst case: no two runs of a group
// log the same step, so the curves are bucketed after the exact slots
// outgrew maxPoints.
func BenchmarkSummarizeUnaligned(b *testing.B) {
	runs := benchRuns()
	for i, r := range runs {
		series := slices.Clone(r.Series)
		for p := range series {
			series[p][0] += float64(i % 10)
		}
		runs[i].Series = series
	}
	b.ReportAllocs()
	for b.Loop() {
		if groups, err := Summarize(runs, 0); err != nil || len(groups[0].Series) != 500 {
			b.Fatalf("%d points, %v", len(groups[0].Series), err)
		}
	}
}

// BenchmarkSummarizeNoSeries is the groups table alone (GET /api/sweeps/{id}).
func BenchmarkSummarizeNoSeries(b *testing.B) {
	runs := benchRuns()
	for i := range runs {
		runs[i].Series = nil
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Summarize(runs, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMembers(b *testing.B) {
	s, err := Parse([]byte(`{"base":{"algorithm":"PPO","params":{"gamma":0.99}},"grid":{"lr":[1e-4,3e-4,1e-3,3e-3],"n_steps":[128,256,512,1024,2048]},"random":{"clip":{"dist":"uniform","min":0.1,"max":0.3}},"samples":50,"seedCount":10}`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if ms := s.Members(); len(ms) != 10000 {
			b.Fatalf("%d members", len(ms))
		}
	}
}

// TestFlatKeyMatchesCanonical: GroupKey's fast path gives the general
// path's key for every object it accepts, and declines the rest.
func TestFlatKeyMatchesCanonical(t *testing.T) {
	slow := func(p []byte) string {
		var obj map[string]any
		dec := json.NewDecoder(strings.NewReader(string(p)))
		dec.UseNumber()
		if err := dec.Decode(&obj); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		delete(obj, SeedParam)
		return string(appendCanonical(nil, obj))
	}
	for _, p := range []string{`{}`, ` { } `, `{"seed":1}`, `{"a":1,"seed":2,"b":"x"}`, `{"b" : 1e-3 ,"a":-0,"c":true,"d":null,"e":false}`,
		`{"a":"<&>"}`, `{"":1}`, `{"big":123456789012345678901234567890,"f":1.5E+300}`} {
		key, ok := flatKey([]byte(p), SeedParam)
		if !ok || key != slow([]byte(p)) {
			t.Errorf("flatKey(%s) = %q, %v; want %q", p, key, ok, slow([]byte(p)))
		}
	}
	for _, p := range []string{`{"a":[1]}`, `{"a":{"b":1}}`, `{"a":"\n"}`, `{"a":"é"}`, `{"a\u0041":1}`, `{"a":1,"a":2}`, `[1]`, `1`} {
		if key, ok := flatKey([]byte(p), SeedParam); ok {
			t.Errorf("flatKey(%s) = %q; want it to decline", p, key)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		value := rapid.OneOf(
			rapid.Map(rapid.Int64(), func(i int64) string { return fmt.Sprint(i) }),
			rapid.Map(rapid.Float64Range(-1e300, 1e300), func(f float64) string { b, _ := json.Marshal(f); return string(b) }),
			rapid.SampledFrom([]string{"true", "false", "null", "1.0", "-0", "1E2", "0.0001", `"x"`, `"a b"`, `"<>"`, `"\t"`, `"é"`, "[1,2]", `{"k":1}`}),
			rapid.Map(rapid.StringMatching(`[ -~]{0,8}`), func(s string) string { b, _ := json.Marshal(s); return string(b) }),
		)
		names := rapid.SampledFrom([]string{"a", "b", "lr", "seed", "x.y", "A", "_", ""})
		n := rapid.IntRange(0, 6).Draw(t, "n")
		var b strings.Builder
		b.WriteString("{")
		seen := map[string]bool{}
		for i := range n {
			k := names.Draw(t, "name")
			if seen[k] {
				continue
			}
			seen[k] = true
			if i > 0 && b.Len() > 1 {
				b.WriteString(rapid.SampledFrom([]string{",", " ,", ", "}).Draw(t, "comma"))
			}
			fmt.Fprintf(&b, "%q%s%s", k, rapid.SampledFrom([]string{":", " : "}).Draw(t, "colon"), value.Draw(t, "value"))
		}
		b.WriteString("}")
		p := []byte(b.String())
		if !json.Valid(p) {
			t.Fatalf("generated invalid JSON %s", p)
		}
		if key, ok := flatKey(p, SeedParam); ok && key != slow(p) {
			t.Fatalf("flatKey(%s) = %s; general path %s", p, key, slow(p))
		}
		if key, err := GroupKey(p); err != nil || key != slow(p) {
			t.Fatalf("GroupKey(%s) = %s, %v; want %s", p, key, err, slow(p))
		}
	})
}
