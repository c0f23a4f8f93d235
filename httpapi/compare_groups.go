package httpapi

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/rlsched/rlsched/stats"
	"github.com/rlsched/rlsched/sweep"
)

// The groups and tasks of a comparison: runs keyed by their params' values,
// scored, normalised, and their curves aligned, for package stats.

// keyed is a run's group or task: its params' values (as canonical JSON)
// and the name they make.
type keyed struct {
	names  []string
	values []json.RawMessage
	name   string
}

// valueText is a param value as a name shows it: a string as it is,
// anything else as its JSON.
func valueText(v json.RawMessage) string {
	var str string
	if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &str) == nil {
		return str
	}
	return string(v)
}

// canonicalValue is v as JSON that equal values share (1e-3 and 0.001
// alike); null when v is absent.
func canonicalValue(v json.RawMessage) json.RawMessage {
	var x any
	if len(v) == 0 || json.Unmarshal(v, &x) != nil {
		return json.RawMessage("null")
	}
	b, _ := json.Marshal(x)
	return b
}

func keyOf(params map[string]json.RawMessage, names []string) keyed {
	k := keyed{names: names, values: make([]json.RawMessage, len(names))}
	texts := make([]string, len(names))
	for i, n := range names {
		k.values[i] = canonicalValue(params[n])
		texts[i] = valueText(k.values[i])
	}
	k.name = strings.Join(texts, ",")
	return k
}

// tagKey is the task that a run's first tag NAME:VALUE names (null
// without one), keyed as a param tag.NAME of the value VALUE would be.
func tagKey(tags []string, name string) keyed {
	field := "tag." + name
	v := map[string]json.RawMessage{}
	for _, t := range tags {
		if value, ok := strings.CutPrefix(t, name+":"); ok {
			v[field], _ = json.Marshal(value)
			break
		}
	}
	return keyOf(v, []string{field})
}

// id tells keys apart: their names and canonical values (a name's text
// would take "1" for 1).
func (k keyed) id() string {
	var b strings.Builder
	for i, n := range k.names {
		b.WriteString(n)
		b.WriteByte(0)
		b.Write(k.values[i])
		b.WriteByte(0)
	}
	return b.String()
}

func (k keyed) object() map[string]json.RawMessage {
	m := make(map[string]json.RawMessage, len(k.names))
	for i, n := range k.names {
		m[n] = k.values[i]
	}
	return m
}

// compareKey orders groups and tasks: value by value, numbers as numbers.
func compareKey(a, b keyed) int {
	for i := range min(len(a.values), len(b.values)) {
		x, errx := strconv.ParseFloat(string(a.values[i]), 64)
		y, erry := strconv.ParseFloat(string(b.values[i]), 64)
		if errx == nil && erry == nil {
			if c := cmp.Compare(x, y); c != 0 {
				return c
			}
			continue
		}
		if c := strings.Compare(string(a.values[i]), string(b.values[i])); c != 0 {
			return c
		}
	}
	return cmp.Or(cmp.Compare(len(a.values), len(b.values)), strings.Compare(a.name, b.name))
}

// compareGroup is a group as the comparison builds it.
type compareGroup struct {
	key     keyed
	runs    []string
	scores  stats.Group
	series  [][][][2]float64 // by task, per run: the finite points (curves only)
	skipped int
}

// group makes each run a score and puts it in its group and task. Runs
// without the metric are missing; those whose score is NaN or ±Inf are
// skipped (counted in their group). An error when no run has a score.
func (c *compareQuery) group(runs []compareRun) (groups []*compareGroup, tasks []keyed, missing, skipped int, e *apiError) {
	type placed struct {
		group, task keyed
		score       float64
		ok          bool
		run         compareRun
	}
	var ps []placed
	for _, run := range runs {
		var params map[string]json.RawMessage
		_ = json.Unmarshal(run.params, &params) // a stored run's params are an object or null
		if len(run.points) == 0 {
			missing++
			continue
		}
		by := c.by
		if by == nil {
			for name := range params {
				if name != sweep.SeedParam && name != c.task {
					by = append(by, name)
				}
			}
			slices.Sort(by)
		}
		p := placed{group: keyOf(params, by), run: run}
		if c.task != "" {
			p.task = keyOf(params, []string{c.task})
		} else if c.taskTag != "" {
			p.task = tagKey(run.tags, c.taskTag)
		}
		p.score, p.ok = stats.Score(run.points, c.window)
		if !p.ok {
			skipped++
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return nil, nil, missing, skipped, errBadRequest("metric: no run of the selection has a series %q", c.metric)
	}
	if skipped == len(ps) {
		return nil, nil, missing, skipped, errBadRequest("metric: every run's %q is NaN or ±Inf at its end", c.metric)
	}
	byGroup := map[string]*compareGroup{}
	byTask := map[string]int{}
	for _, p := range ps {
		if _, ok := byTask[p.task.id()]; !ok {
			byTask[p.task.id()] = len(tasks)
			tasks = append(tasks, p.task)
		}
		gk := p.group.id()
		g := byGroup[gk]
		if g == nil {
			g = &compareGroup{key: p.group}
			byGroup[gk] = g
			groups = append(groups, g)
			if len(groups) > stats.MaxGroups {
				return nil, nil, missing, skipped, errBadRequest("by: more than %d groups; group by fewer params", stats.MaxGroups)
			}
		}
		g.runs = append(g.runs, p.run.id)
		if !p.ok {
			g.skipped++
			continue
		}
		t := byTask[p.task.id()]
		for len(g.scores.Scores) <= t {
			g.scores.Scores = append(g.scores.Scores, nil)
			g.series = append(g.series, nil)
		}
		g.scores.Scores[t] = append(g.scores.Scores[t], p.score)
		if c.curve > 0 {
			kept, _ := stats.FinitePoints(p.run.points)
			g.series[t] = append(g.series[t], kept)
		}
	}
	// Groups and tasks in their keys' order; the tasks' indexes follow.
	order := make([]int, len(tasks))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return compareKey(tasks[a], tasks[b]) })
	sorted := make([]keyed, len(tasks))
	newIndex := make([]int, len(tasks))
	for i, o := range order {
		sorted[i], newIndex[o] = tasks[o], i
	}
	tasks = sorted
	for _, g := range groups {
		scores := make([][]float64, len(tasks))
		series := make([][][][2]float64, len(tasks))
		for t := range g.scores.Scores {
			scores[newIndex[t]], series[newIndex[t]] = g.scores.Scores[t], g.series[t]
		}
		g.scores.Scores, g.series = scores, series
	}
	slices.SortFunc(groups, func(a, b *compareGroup) int { return compareKey(a.key, b.key) })
	// A group whose every run was skipped has nothing to estimate.
	kept := groups[:0]
	for _, g := range groups {
		if g.scores.N() > 0 {
			kept = append(kept, g)
		}
	}
	return kept, tasks, missing, skipped, nil
}

// groupNamed is the index of the group called name: its name, or the
// same values as numbers (1e-3 for 0.001).
func groupNamed(groups []*compareGroup, name string) int {
	parts := strings.Split(name, ",")
	for i, g := range groups {
		if g.key.name == name {
			return i
		}
	}
	for i, g := range groups {
		if len(parts) != len(g.key.values) {
			continue
		}
		match := true
		for j, v := range g.key.values {
			if valueText(v) == parts[j] {
				continue
			}
			x, errx := strconv.ParseFloat(string(v), 64)
			y, erry := strconv.ParseFloat(parts[j], 64)
			if errx != nil || erry != nil || x != y {
				match = false
				break
			}
		}
		if match {
			return i
		}
	}
	return -1
}

// groupNames and taskNames list the first ten names, quoted, for a
// message.
func groupNames(groups []*compareGroup) string {
	return someNames(len(groups), func(i int) string { return groups[i].key.name })
}

func taskNames(tasks []keyed) string {
	return someNames(len(tasks), func(i int) string { return tasks[i].name })
}

func someNames(n int, name func(int) string) string {
	names := make([]string, 0, min(n, 10))
	for i := range min(n, 10) {
		names = append(names, strconv.Quote(name(i)))
	}
	if n > 10 {
		names = append(names, "…")
	}
	return strings.Join(names, ", ")
}

// improvePair reads improve=A:B: the first split at a colon whose two
// sides both name a group.
func (c *compareQuery) improvePair(groups []*compareGroup) (int, int, *apiError) {
	for i := range len(c.improve) {
		if c.improve[i] != ':' {
			continue
		}
		a, b := groupNamed(groups, c.improve[:i]), groupNamed(groups, c.improve[i+1:])
		if a >= 0 && b >= 0 {
			if a == b {
				return 0, 0, errBadRequest("improve: compare two different groups")
			}
			return a, b, nil
		}
	}
	return 0, 0, errBadRequest("improve must be GROUP_A:GROUP_B, two of the groups' names (%s)", groupNames(groups))
}

// spans are each task's normalisation, nil for none.
func (c *compareQuery) spans(groups []*compareGroup, tasks []keyed) ([]stats.Span, *apiError) {
	var lo, hi []float64
	for _, p := range []struct {
		field string
		v     perTask
		dst   *[]float64
	}{{"min", c.lo, &lo}, {"max", c.hi, &hi}} {
		vs, e := p.v.each(p.field, tasks)
		if e != nil {
			return nil, e
		}
		*p.dst = vs
	}
	switch c.norm {
	case "minmax":
		sp := make([]stats.Span, len(tasks))
		for t := range sp {
			sp[t] = stats.Span{Lo: lo[t], Hi: hi[t]}
		}
		return sp, nil
	case "baseline":
		b := groupNamed(groups, c.baseline)
		if b < 0 {
			return nil, errBadRequest("baseline must be one of the groups' names (%s)", groupNames(groups))
		}
		gs := make([]stats.Group, len(groups))
		for i, g := range groups {
			gs[i] = g.scores
		}
		sp, err := stats.BaselineSpans(gs, b, c.lo.all)
		if err != nil {
			return nil, errBadRequest("baseline: %s", taskNamed(err.Error(), tasks))
		}
		if c.lo.by != nil {
			for t := range sp {
				sp[t].Lo = lo[t]
			}
		}
		return sp, nil
	}
	return nil, nil
}

// each is p's value for every task: a name p has no value for, or a value
// for a task there is not, is a 400 naming field.
func (p perTask) each(field string, tasks []keyed) ([]float64, *apiError) {
	vs := make([]float64, len(tasks))
	known := map[string]bool{}
	for t, k := range tasks {
		known[k.name] = true
		vs[t] = p.all
		if p.by == nil {
			continue
		}
		v, ok := p.by[k.name]
		if !ok {
			return nil, errBadRequest("%s: no value for task %q (give TASK=NUMBER for each of %s)", field, k.name, taskNames(tasks))
		}
		vs[t] = v
	}
	for name := range p.by {
		if !known[name] {
			return nil, errBadRequest("%s: no task is named %q (the tasks: %s)", field, name, taskNames(tasks))
		}
	}
	return vs, nil
}

// taskNamed puts the task's name for stats' "task N" in msg.
func taskNamed(msg string, tasks []keyed) string {
	if rest, ok := strings.CutPrefix(msg, "task "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil && n < len(tasks) {
				return "task " + strconv.Quote(tasks[n].name) + rest[i:]
			}
		}
	}
	return msg
}

// normalize maps every score, and every curve's values, by its task's
// span.
func (c *compareQuery) normalize(groups []*compareGroup, tasks []keyed) *apiError {
	sp, e := c.spans(groups, tasks)
	if e != nil || sp == nil {
		return e
	}
	gs := make([]stats.Group, len(groups))
	for i, g := range groups {
		gs[i] = g.scores
	}
	if err := stats.Normalize(gs, sp); err != nil {
		return errBadRequest("normalize: %s", taskNamed(err.Error(), tasks))
	}
	for _, g := range groups {
		for t, runs := range g.series {
			for ri, pts := range runs {
				np := make([][2]float64, len(pts))
				for i, p := range pts {
					np[i] = [2]float64{p[0], (p[1] - sp[t].Lo) / (sp[t].Hi - sp[t].Lo)}
				}
				runs[ri] = np
			}
		}
	}
	return nil
}

// curves are the groups' IQM curves on one grid of c.curve steps.
func (c *compareQuery) curves(groups []*compareGroup, tasks []keyed) ([][]stats.CurvePoint, *apiError) {
	var all [][][2]float64
	for _, g := range groups {
		for _, runs := range g.series {
			all = append(all, runs...)
		}
	}
	grid := stats.Grid(all, c.curve)
	if grid == nil {
		return nil, errBadRequest("curve: no run has a finite point of %q", c.metric)
	}
	cgs := make([]stats.CurveGroup, len(groups))
	for gi, g := range groups {
		cgs[gi].Series = make([][][]float64, len(tasks))
		for t, runs := range g.series {
			for _, pts := range runs {
				if al, ok := stats.Align(pts, grid, nil); ok {
					cgs[gi].Series[t] = append(cgs[gi].Series[t], al)
				}
			}
		}
	}
	cs, err := stats.Curves(cgs, grid, c.opt)
	if err != nil {
		return nil, errBadRequest("curve: %v", err)
	}
	return cs, nil
}
