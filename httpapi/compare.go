package httpapi

import (
	"context"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/stats"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/sweep"
)

// Comparisons (API.md "Comparisons (wave 3)", issue 30): GET /api/compare
// reads the selected runs' series through the store, makes each run a
// score, groups the runs and answers what package stats estimates. Every
// number comes from stats; this file only reads, groups and writes.

const (
	// maxCompareRuns bounds the runs one comparison reads.
	maxCompareRuns = 20_000
	maxCompareIDs  = 1_000
	maxByParams    = 8
	maxWindow      = 100_000
	// maxImproveGroups bounds improve=all: 20 groups are 190 pairs.
	maxImproveGroups = 20
)

// compareQuery is GET /api/compare's query, checked.
type compareQuery struct {
	ids      []string
	filter   store.Filter
	by       []string // param names; none: every param but the seed (and the task's)
	task     string   // a param name, or ""
	taskTag  string   // or a tag's name: a run's task is VALUE of its tag NAME:VALUE
	metric   string
	window   int
	stats    []stats.Stat
	opt      stats.Options
	norm     string  // none, minmax or baseline
	lo, hi   perTask // normalisation's min and max
	baseline string
	taus     []float64
	improve  string
	curve    int // grid points of the IQM curves; 0: none
}

// paramName reads v ("param.NAME") as the name of a param.
func paramName(field, v string) (string, *apiError) {
	name, ok := strings.CutPrefix(v, paramPrefix)
	if !ok || !sweep.ValidParamName(name) {
		return "", errBadRequest("%s must be param.NAME, NAME a param's name", field)
	}
	return name, nil
}

func floatArg(q *fasthttp.Args, field string, def float64) (float64, *apiError) {
	v := string(q.Peek(field))
	if v == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, errBadRequest("%s must be a finite number", field)
	}
	return f, nil
}

// perTask is a number for every task, or one for each task by name.
type perTask struct {
	all float64
	by  map[string]float64 // nil: all
}

// perTaskArg reads field as a number (every task's) or as TASK=NUMBER
// pairs separated by commas.
func perTaskArg(q *fasthttp.Args, field string, def float64) (perTask, *apiError) {
	v := string(q.Peek(field))
	if !strings.Contains(v, "=") {
		f, e := floatArg(q, field, def)
		return perTask{all: f}, e
	}
	p := perTask{by: map[string]float64{}}
	for _, pair := range strings.Split(v, ",") {
		i := strings.LastIndexByte(pair, '=')
		f, err := strconv.ParseFloat(pair[i+1:], 64)
		if i < 1 || err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return p, errBadRequest("%s must be a finite number, or TASK=NUMBER pairs separated by commas", field)
		}
		p.by[pair[:i]] = f
	}
	return p, nil
}

func intArg(q *fasthttp.Args, field string, def, lo, hi int) (int, *apiError) {
	v := string(q.Peek(field))
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, errBadRequest("%s must be an integer %d..%d", field, lo, hi)
	}
	return n, nil
}

func parseCompare(q *fasthttp.Args) (c compareQuery, e *apiError) {
	if v := string(q.Peek("ids")); v != "" {
		for _, id := range strings.Split(v, ",") {
			if !core.ValidTaskID(id) {
				return c, errBadRequest("ids must be run ids separated by commas")
			}
			if !slices.Contains(c.ids, id) { // a run counts once
				c.ids = append(c.ids, id)
			}
		}
		if len(c.ids) > maxCompareIDs {
			return c, errBadRequest("ids: at most %d runs", maxCompareIDs)
		}
	}
	var csvOut bool
	if c.filter, csvOut, e = runFilter(q); e != nil {
		return c, e
	}
	if csvOut {
		return c, errBadRequest("format: GET /api/compare answers JSON only")
	}
	if v := string(q.Peek("by")); v != "" {
		for _, p := range strings.Split(v, ",") {
			name, e := paramName("by", p)
			if e != nil {
				return c, e
			}
			c.by = append(c.by, name)
		}
		if len(c.by) > maxByParams {
			return c, errBadRequest("by: at most %d params", maxByParams)
		}
	}
	if v := string(q.Peek("task")); v != "" {
		if name, ok := strings.CutPrefix(v, "tag."); ok {
			if name == "" || len(name) > maxTagChars || strings.ContainsAny(name, ":\x00") {
				return c, errBadRequest("task must be param.NAME or tag.NAME (a run's tag NAME:VALUE names its task)")
			}
			c.taskTag = name
		} else if c.task, e = paramName("task", v); e != nil {
			return c, errBadRequest("task must be param.NAME or tag.NAME (a run's tag NAME:VALUE names its task)")
		}
	}
	c.metric = strings.TrimSpace(string(q.Peek("metric")))
	if c.metric == "" {
		c.metric = "episode_reward"
	}
	if len(c.metric) > 128 {
		return c, errBadRequest("metric must be a metric name of at most 128 bytes")
	}
	if c.window, e = intArg(q, "window", 1, 1, maxWindow); e != nil {
		return c, e
	}
	if v := string(q.Peek("stat")); v != "" {
		for _, s := range strings.Split(v, ",") {
			st, err := stats.ParseStat(s)
			if err != nil {
				return c, errBadRequest("stat: %v", err)
			}
			if !slices.Contains(c.stats, st) {
				c.stats = append(c.stats, st)
			}
		}
	} else {
		c.stats = stats.Stats
	}
	c.opt = stats.DefaultOptions()
	if c.opt.Reps, e = intArg(q, "reps", c.opt.Reps, 1, stats.MaxReps); e != nil {
		return c, e
	}
	if c.opt.CI, e = floatArg(q, "ci", c.opt.CI); e != nil {
		return c, e
	}
	if !(c.opt.CI > 0 && c.opt.CI < 1) {
		return c, errBadRequest("ci must be in (0, 1), such as 0.95")
	}
	if v := string(q.Peek("seed")); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return c, errBadRequest("seed must be an integer 0..%d", uint64(math.MaxUint64))
		}
		c.opt.Seed = seed
	}
	if c.opt.Gamma, e = floatArg(q, "gamma", c.opt.Gamma); e != nil {
		return c, e
	}
	switch c.norm = string(q.Peek("normalize")); c.norm {
	case "", "none":
		c.norm = "none"
	case "minmax":
		if !q.Has("min") || !q.Has("max") {
			return c, errBadRequest("normalize=minmax needs min and max")
		}
		if c.lo, e = perTaskArg(q, "min", 0); e != nil {
			return c, e
		}
		if c.hi, e = perTaskArg(q, "max", 0); e != nil {
			return c, e
		}
		if c.lo.by == nil && c.hi.by == nil && c.lo.all == c.hi.all {
			return c, errBadRequest("min and max must differ")
		}
	case "baseline":
		if c.baseline = string(q.Peek("baseline")); c.baseline == "" {
			return c, errBadRequest("normalize=baseline needs baseline=GROUP, a group's name")
		}
		if c.lo, e = perTaskArg(q, "min", math.NaN()); e != nil {
			return c, e
		}
	default:
		return c, errBadRequest("normalize must be none, minmax or baseline")
	}
	if v := string(q.Peek("profile")); v != "" {
		for _, s := range strings.Split(v, ",") {
			tau, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || math.IsNaN(tau) || math.IsInf(tau, 0) {
				return c, errBadRequest("profile must be finite numbers (τ) separated by commas")
			}
			if len(c.taus) == stats.MaxTaus {
				return c, errBadRequest("profile: at most %d points", stats.MaxTaus)
			}
			c.taus = append(c.taus, tau)
		}
	}
	c.improve = string(q.Peek("improve"))
	if c.curve, e = intArg(q, "curve", 0, 2, stats.MaxGridPoints); e != nil {
		return c, e
	}
	return c, nil
}

// compareRun is what a comparison needs of a run.
type compareRun struct {
	id     string
	params json.RawMessage
	points [][2]float64
	tags   []string // read only for task=tag.NAME
}

// compareRuns reads the selection: ids (the filters then unread), or a
// sweep's members' latest runs (sweep= alone; a sweep has at most
// sweep.MaxMembers), or the runs /api/tasks' filters find (at most
// maxCompareRuns); each with its series metric.
func (s *Server) compareRuns(ctx context.Context, c *compareQuery) ([]compareRun, *apiError) {
	var out []compareRun
	series := func(t core.Task) *apiError {
		m, err := s.st.Metrics(ctx, t.ID, []string{c.metric})
		if err != nil {
			return storeError(err, "metrics of run "+t.ID)
		}
		out = append(out, compareRun{t.ID, t.Params, m[c.metric], t.Tags})
		return nil
	}
	switch {
	case len(c.ids) > 0:
		for _, id := range c.ids {
			t, err := s.st.Task(ctx, id)
			if err != nil {
				return nil, storeError(err, "run "+id)
			}
			if e := series(t); e != nil {
				return nil, e
			}
		}
	case c.filter.Sweep != "" && reflect.DeepEqual(c.filter, store.Filter{Sweep: c.filter.Sweep}):
		ms, _, err := s.st.SweepMetrics(ctx, c.filter.Sweep, c.metric)
		if err != nil {
			return nil, storeError(err, "sweep "+c.filter.Sweep)
		}
		for _, m := range ms {
			run := compareRun{id: m.TaskID, params: m.Params, points: m.Points}
			if c.taskTag != "" { // the members' series carry no tags
				t, err := s.st.Task(ctx, m.TaskID)
				if err != nil {
					return nil, storeError(err, "run "+m.TaskID)
				}
				run.tags = t.Tags
			}
			out = append(out, run)
		}
	default:
		f := c.filter
		f.Limit, f.Cursor = maxListLimit, ""
		for {
			ts, next, err := s.st.ListTasks(ctx, f)
			if err != nil {
				return nil, storeError(err, "runs")
			}
			if len(out)+len(ts) > maxCompareRuns {
				return nil, errBadRequest("the selection has more than %d runs: narrow it (sweep=, ids= or the /api/tasks filters)", maxCompareRuns)
			}
			for _, t := range ts {
				if e := series(t); e != nil {
					return nil, e
				}
			}
			if next == "" {
				break
			}
			f.Cursor = next
		}
	}
	return out, nil
}

// jnum is a number of the answer: null when not finite (JSON has no NaN).
type jnum float64

func (f jnum) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(f), 'g', -1, 64), nil
}

type jinterval struct {
	Value jnum    `json:"value"`
	CI    [2]jnum `json:"ci"`
}

func intervalOf(iv stats.Interval) jinterval {
	return jinterval{jnum(iv.Value), [2]jnum{jnum(iv.Lo), jnum(iv.Hi)}}
}

type improvementAnswer struct {
	A string `json:"a"`
	B string `json:"b"`
	jinterval
}

type compareGroupAnswer struct {
	Key     map[string]json.RawMessage `json:"key"`
	Name    string                     `json:"name"`
	N       int                        `json:"n"`
	Skipped int                        `json:"skipped"`
	Runs    []string                   `json:"runs"`
	Stats   map[stats.Stat]jinterval   `json:"stats"`
	Profile [][4]jnum                  `json:"profile,omitempty"`
	Curve   [][4]jnum                  `json:"curve,omitempty"`
}

// compare is GET /api/compare.
func (s *Server) compare(r *request) *apiError {
	c, e := parseCompare(r.ctx.QueryArgs())
	if e != nil {
		return e
	}
	ctx, cancel := sweepCtx()
	defer cancel()
	runs, e := s.compareRuns(ctx, &c)
	if e != nil {
		return e
	}
	if len(runs) == 0 {
		return errBadRequest("the selection has no run: check sweep=, ids= or the filters")
	}
	groups, tasks, missing, skipped, e := c.group(runs)
	if e != nil {
		return e
	}
	if e := c.normalize(groups, tasks); e != nil {
		return e
	}
	req := stats.Request{Stats: c.stats, Taus: c.taus, Options: c.opt}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, g := range groups {
		req.Groups = append(req.Groups, g.scores)
		for _, xs := range g.scores.Scores {
			for _, x := range xs {
				lo, hi = min(lo, x), max(hi, x)
			}
		}
	}
	for _, tau := range c.taus {
		if tau < lo || tau > hi {
			return errBadRequest("profile: τ %g is outside the scores' range [%g, %g]", tau, lo, hi)
		}
	}
	all := c.improve == "all"
	switch {
	case all:
		if len(groups) > maxImproveGroups {
			return errBadRequest("improve=all: at most %d groups (here %d); name one pair, A:B", maxImproveGroups, len(groups))
		}
		for a := range groups {
			for b := a + 1; b < len(groups); b++ {
				req.Improve = append(req.Improve, [2]int{a, b})
			}
		}
	case c.improve != "":
		ia, ib, e := c.improvePair(groups)
		if e != nil {
			return e
		}
		req.Improve = [][2]int{{ia, ib}}
	}
	res, err := stats.Compare(req)
	if err != nil {
		return errBadRequest("cannot compare: %v", err)
	}
	var curves [][]stats.CurvePoint
	if c.curve > 0 {
		if curves, e = c.curves(groups, tasks); e != nil {
			return e
		}
	}
	ans := struct {
		Metric      string               `json:"metric"`
		Window      int                  `json:"window"`
		Reps        int                  `json:"reps"`
		CI          float64              `json:"ci"`
		Seed        uint64               `json:"seed"`
		Normalize   string               `json:"normalize"`
		Tasks       []string             `json:"tasks,omitempty"`
		Runs        int                  `json:"runs"`
		Missing     int                  `json:"missing"`
		Skipped     int                  `json:"skipped"`
		Groups      []compareGroupAnswer `json:"groups"`
		Improvement *improvementAnswer   `json:"improvement,omitempty"`
		// improve=all: every ordered pair, a over b, a's rows in the groups' order.
		Improvements []improvementAnswer `json:"improvements,omitempty"`
	}{Metric: c.metric, Window: c.window, Reps: c.opt.Reps, CI: c.opt.CI, Seed: c.opt.Seed, Normalize: c.norm,
		Runs: len(runs), Missing: missing, Skipped: skipped}
	if c.task != "" || c.taskTag != "" {
		for _, t := range tasks {
			ans.Tasks = append(ans.Tasks, t.name)
		}
	}
	for gi, g := range groups {
		gr := res.Groups[gi]
		ga := compareGroupAnswer{Key: g.key.object(), Name: g.key.name, N: gr.N, Skipped: g.skipped, Runs: g.runs,
			Stats: make(map[stats.Stat]jinterval, len(gr.Stats))}
		for st, iv := range gr.Stats {
			ga.Stats[st] = intervalOf(iv)
		}
		for _, p := range gr.Profile {
			ga.Profile = append(ga.Profile, [4]jnum{jnum(p.Tau), jnum(p.Value), jnum(p.Lo), jnum(p.Hi)})
		}
		if curves != nil {
			for _, p := range curves[gi] {
				ga.Curve = append(ga.Curve, [4]jnum{jnum(p.Step), jnum(p.Value), jnum(p.Lo), jnum(p.Hi)})
			}
		}
		ans.Groups = append(ans.Groups, ga)
	}
	answer := func(im stats.Improvement) improvementAnswer {
		return improvementAnswer{groups[im.A].key.name, groups[im.B].key.name, intervalOf(im.Interval)}
	}
	switch {
	case all:
		// Each pair was estimated once, a < b; b over a is its reverse.
		byPair := map[[2]int]stats.Improvement{}
		for _, im := range res.Improvements {
			byPair[[2]int{im.A, im.B}], byPair[[2]int{im.B, im.A}] = im, im.Reverse()
		}
		for a := range groups {
			for b := range groups {
				if a != b {
					ans.Improvements = append(ans.Improvements, answer(byPair[[2]int{a, b}]))
				}
			}
		}
	case len(res.Improvements) == 1:
		im := answer(res.Improvements[0])
		ans.Improvement = &im
	}
	return s.writeJSON(r, fasthttp.StatusOK, ans)
}
