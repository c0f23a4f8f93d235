package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/signature"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/sweep"
)

// Sweeps and seed groups (API.md): a sweep is one submission whose members
// are ordinary runs (sweep expands and summarises; the store creates
// them in one transaction).

// sweepTimeout bounds the store work of one sweep request: a 10,000-member
// sweep is one large transaction, and its cancel is as many cancels.
const sweepTimeout = time.Minute

// cancelWorkers is how many member cancels run at once: enough for the
// store's group commit to batch them.
const cancelWorkers = 32

func sweepCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), sweepTimeout)
}

// prefixed is e with its message under field ("base: gpus must be ...").
func prefixed(field string, e *apiError) *apiError {
	return &apiError{e.Status, e.Code, field + ": " + e.Message}
}

// createSweep is POST /api/sweeps.
func (s *Server) createSweep(r *request) *apiError {
	spec, err := sweep.Parse(r.ctx.PostBody())
	if err != nil {
		return errBadRequest("%s", err.Error())
	}
	var b submitBody
	if e := decodeJSON(spec.Base, &b); e != nil {
		return prefixed("base", e)
	}
	stored, err := storedSpec(spec, b)
	if err != nil {
		return errBadRequest("%s", err.Error())
	}
	b.Params = nil // sweep checked them; each member has its own
	sp := newSpec()
	if e := s.apply(&sp, &b); e != nil {
		return prefixed("base", e)
	}
	if e := priorityAllowed(r.user, b.Priority); e != nil {
		return prefixed("base", e)
	}
	if e := s.checkResumeFrom(r.user, &sp); e != nil {
		return prefixed("base", e)
	}
	if e := s.checkDeps(r.user, &sp); e != nil {
		return prefixed("base", e)
	}
	name := spec.Name
	if name == "" {
		name = sp.name
	}
	if name == "" {
		name = sp.defaultName()
	}
	if spec.Project != "" {
		sp.project = spec.Project
	}
	id := core.NewSweepID()
	tag := core.SweepTag(id)
	if !slices.Contains(sp.tags, tag) {
		if len(sp.tags) >= maxTags {
			return errBadRequest("base.tags: at most %d tags in a sweep (each member also carries %q)", maxTags-1, tag)
		}
		sp.tags = append(slices.Clone(sp.tags), tag)
	}
	members, err := spec.Initial()
	if err != nil {
		return errBadRequest("random: %v", err)
	}
	runs := make([]*core.Task, len(members))
	ids := make([]string, len(members))
	now := time.Now()
	for i, m := range members {
		msp := sp
		msp.params = m.Params
		msp.name = memberName(name, m.Label)
		t := s.newRun(r, msp)
		// One instant a member apart, so the queue serves them (and lists
		// show them) in member order.
		t.CreatedAt = now.Add(time.Duration(i))
		runs[i], ids[i] = &t, t.ID
	}
	sw := &store.Sweep{ID: id, Name: name, Project: sp.project, UserID: r.user.ID, MaxParallel: spec.MaxParallel,
		Spec: stored, CreatedAt: now}
	ctx, cancel := sweepCtx()
	defer cancel()
	if e := s.roomInQueue(ctx, r.user.ID, len(runs)); e != nil {
		return e
	}
	if len(sp.diff) > 0 {
		// Kept once, as a run's is, and named by every member.
		did, err := s.st.PutCodeDiff(ctx, sp.diff)
		if err != nil {
			return storeError(err, "code diff")
		}
		for _, t := range runs {
			t.Code.DiffID, t.Code.HasDiff = did, true
		}
	}
	if err := s.st.CreateSweep(ctx, sw, runs); err != nil {
		return storeError(err, "sweep")
	}
	s.decideCreated(ctx, runs)
	s.ctl.Notify()
	s.log.Info().Str("traceId", r.trace).Str("sweepId", id).Int("members", len(runs)).Int64("userId", r.user.ID).
		Msg("sweep queued")
	r.ctx.Response.Header.Set(signature.HeaderRunsQueued, strconv.Itoa(len(ids)))
	return s.writeJSON(r, fasthttp.StatusAccepted, struct {
		ID   string   `json:"id"`
		Runs []string `json:"runs"`
	}{id, ids})
}

// AddMembers stores members as sweep sw's members from, from+1, ... (a tpe
// sweep's proposals, made by the sweep controller): each a run of
// template's spec (a member's latest run: the sweep's base, as a retry
// makes it) with the member's params and name, owned by the sweep's owner
// under the sweep's trace id; core.ErrConflict when another master added
// them first. It wakes the scheduler. Safe from any goroutine.
func (s *Server) AddMembers(ctx context.Context, sw store.Sweep, template core.Task, from int, members []sweep.Member) error {
	owner := core.User{ID: sw.UserID, Username: sw.User}
	if u, err := s.st.UserByID(ctx, sw.UserID); err == nil {
		owner.Role = u.Role // else clamped as a user's
	}
	// template may be a member an admin raised: a proposal is the owner's.
	sp := clampPriority(owner, s.specOf(template))
	runs := make([]*core.Task, len(members))
	now := time.Now()
	for i, m := range members {
		msp := sp
		msp.params = m.Params
		msp.name = memberName(sw.Name, m.Label)
		t := s.runOf(owner, template.TraceID, msp)
		t.CreatedAt = now.Add(time.Duration(i)) // member order, as at creation
		runs[i] = &t
	}
	if err := s.st.AddSweepMembers(ctx, sw.ID, from, runs); err != nil {
		return err
	}
	s.ctl.Notify()
	return nil
}

// memberName names a member after its sweep and its cell and seed.
func memberName(name, label string) string {
	if label != "" {
		if name != "" {
			name += " "
		}
		name += label
	}
	if utf8.RuneCountInString(name) > maxNameChars {
		name = string([]rune(name)[:maxNameChars-1]) + "…"
	}
	return name
}

// sweepSummary is a sweep in GET /api/sweeps.
type sweepSummary struct {
	ID          string              `json:"id"`
	Name        string              `json:"name"`
	Project     string              `json:"project"`
	User        string              `json:"user"`
	UserID      int64               `json:"userId"`
	CreatedAt   time.Time           `json:"createdAt"`
	Members     int                 `json:"members"`
	MaxParallel int                 `json:"maxParallel"`
	Counts      map[core.Status]int `json:"counts"`
}

func summaryOf(sw store.Sweep) sweepSummary {
	return sweepSummary{ID: sw.ID, Name: sw.Name, Project: sw.Project, User: sw.User, UserID: sw.UserID,
		CreatedAt: sw.CreatedAt, Members: sw.Members, MaxParallel: sw.MaxParallel, Counts: sw.Counts}
}

// listSweeps is GET /api/sweeps?user=&limit=&cursor=.
func (s *Server) listSweeps(r *request) *apiError {
	q := r.ctx.QueryArgs()
	f := store.SweepFilter{User: string(q.Peek("user")), Cursor: string(q.Peek("cursor"))}
	if len(f.User) > 64 {
		return errBadRequest("user must be a username")
	}
	if len(f.Cursor) > maxCursorBytes {
		return errBadRequest("malformed cursor: pass nextCursor of a previous page")
	}
	if v := string(q.Peek("limit")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return errBadRequest("limit must be an integer 1..%d", maxListLimit)
		}
		f.Limit = min(n, maxListLimit)
	}
	ctx, cancel := storeCtx()
	defer cancel()
	sws, next, err := s.st.ListSweeps(ctx, f)
	if err != nil {
		if isBadCursor(err) {
			return errBadRequest("malformed cursor: pass nextCursor of a previous page")
		}
		return storeError(err, "sweeps")
	}
	items := make([]sweepSummary, len(sws))
	for i, sw := range sws {
		items[i] = summaryOf(sw)
	}
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		Items      []sweepSummary `json:"items"`
		NextCursor string         `json:"nextCursor"`
	}{items, next})
}

// sweepRuns reads sweep r.id and the latest run of each member.
func (s *Server) sweepRuns(ctx context.Context, r *request) (store.Sweep, []core.Task, *apiError) {
	sw, err := s.st.Sweep(ctx, r.id)
	if err != nil {
		return sw, nil, storeError(err, "sweep "+r.id)
	}
	runs, err := s.st.SweepRuns(ctx, r.id)
	if err != nil {
		return sw, nil, storeError(err, "sweep "+r.id)
	}
	// Counted from the runs read, so counts and runs always agree.
	sw.Counts = zeroCounts()
	for _, t := range runs {
		sw.Counts[t.Status]++
	}
	return sw, runs, nil
}

// sweepMembers reads sweep r.id and what groups need of each member's
// latest run.
func (s *Server) sweepMembers(ctx context.Context, r *request) (store.Sweep, []sweep.Run, *apiError) {
	sw, err := s.st.Sweep(ctx, r.id)
	if err != nil {
		return sw, nil, storeError(err, "sweep "+r.id)
	}
	ms, _, err := s.st.SweepMetrics(ctx, r.id, "")
	if err != nil {
		return sw, nil, storeError(err, "sweep "+r.id)
	}
	in := make([]sweep.Run, len(ms))
	sw.Counts = zeroCounts()
	for i, m := range ms {
		in[i] = sweep.Run{ID: m.TaskID, Params: m.Params, Status: m.Status, FinalReward: m.FinalReward}
		sw.Counts[m.Status]++
	}
	return sw, in, nil
}

func zeroCounts() map[core.Status]int {
	m := map[core.Status]int{}
	for _, st := range core.Statuses() {
		m[st] = 0
	}
	return m
}

// getSweep is GET /api/sweeps/{id}: the sweep, each member's latest run,
// and the seed groups (the members' params without seed) with their final
// rewards' mean, std, min and max; ?format=csv gives the groups as CSV,
// ?runs=false leaves the runs out (a poll of a large sweep's progress).
func (s *Server) getSweep(r *request) *apiError {
	q := r.ctx.QueryArgs()
	csvOut, e := formatCSV(q)
	if e != nil {
		return e
	}
	withRuns := true
	switch v := string(q.Peek("runs")); v {
	case "", "true":
	case "false":
		withRuns = false
	default:
		return errBadRequest("runs must be true or false")
	}
	ctx, cancel := sweepCtx()
	defer cancel()
	var (
		sw   store.Sweep
		runs []core.Task
		in   []sweep.Run
	)
	if withRuns || csvOut {
		if sw, runs, e = s.sweepRuns(ctx, r); e != nil {
			return e
		}
		for _, t := range runs {
			in = append(in, sweep.Run{ID: t.ID, Params: t.Params, Status: t.Status, FinalReward: t.FinalReward})
		}
	} else {
		// The groups need the runs' params, statuses and final rewards
		// only: SweepMetrics without a series reads just those.
		if sw, in, e = s.sweepMembers(ctx, r); e != nil {
			return e
		}
	}
	groups, err := sweep.Summarize(in, 0)
	if err != nil {
		return storeError(err, "sweep "+r.id)
	}
	if csvOut {
		return s.writeCSV(r, "sweep-"+sw.ID+".csv", groupRows(groups))
	}
	var views []core.Task
	if withRuns {
		views = make([]core.Task, len(runs))
		for i, t := range runs {
			views[i] = t.ViewFor(r.user)
		}
		s.explainQueue(ctx, views)
	}
	if groups == nil {
		groups = []sweep.Group{}
	}
	search, e := s.sweepSearch(ctx, r, sw, runs)
	if e != nil {
		return e
	}
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		sweepSummary
		Spec   json.RawMessage `json:"spec"`
		Runs   []core.Task     `json:"runs,omitempty"` // a sweep has members: absent only with runs=false
		Groups []sweep.Group   `json:"groups"`
		*sweepSearch
	}{summaryOf(sw), specFor(sw, r.user), views, groups, search})
}

// sweepSearch is sw's search results (searchOf); nil for a sweep that does
// not search (neither tpe nor earlyStop: its GET reads what it read before,
// no series) and for a spec stored before it parsed as it does now. runs
// are the members' latest runs, read here when nil.
func (s *Server) sweepSearch(ctx context.Context, r *request, sw store.Sweep, runs []core.Task) (*sweepSearch, *apiError) {
	spec, err := sweep.Parse(sw.Spec)
	if err != nil || spec.Method != sweep.TPE && spec.EarlyStop == nil {
		return nil, nil
	}
	if runs == nil {
		if runs, err = s.st.SweepRuns(ctx, r.id); err != nil {
			return nil, storeError(err, "sweep "+r.id)
		}
	}
	seriesOf := func(name string) (map[string][][2]float64, *apiError) {
		ms, _, err := s.st.SweepMetrics(ctx, r.id, name)
		if err != nil {
			return nil, storeError(err, "sweep "+r.id)
		}
		out := make(map[string][][2]float64, len(ms))
		for _, m := range ms {
			out[m.TaskID] = m.Points
		}
		return out, nil
	}
	series, e := seriesOf(spec.Metric)
	if e != nil {
		return nil, e
	}
	var esSeries map[string][][2]float64
	if es := spec.EarlyStop; es != nil {
		esSeries = series
		if es.Metric != spec.Metric {
			if esSeries, e = seriesOf(es.Metric); e != nil {
				return nil, e
			}
		}
	}
	out, err := searchOf(spec, runs, series, esSeries)
	if err != nil {
		s.log.Warn().Str("sweepId", sw.ID).Err(err).Msg("cannot read a sweep's search results")
		return nil, nil
	}
	if spec.EarlyStop != nil {
		ds, err := s.st.SweepDecisions(ctx, r.id)
		if err != nil {
			return nil, storeError(err, "sweep "+r.id)
		}
		out.Decisions = decisionsOf(ds)
	}
	return &out, nil
}

// storedSpec is a sweep's spec as it is stored and shown
// (sweep.Spec.Normalized): its base is b, the decoded base, re-encoded
// without its code diff (stored apart, as a run's is) and with the
// credentials of its remote redacted.
func storedSpec(spec *sweep.Spec, b submitBody) (json.RawMessage, error) {
	if b.Code != nil {
		c := *b.Code
		c.Diff, c.GitRemote = "", core.RedactRemote(c.GitRemote)
		b.Code = &c
	}
	base, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	return spec.Normalized(base)
}

// specFor is the sweep's spec as u may see it: base.env's values masked
// unless u owns the sweep or is an admin. A spec stored before specs were
// normalised (storedSpec) is normalised here, so no body is ever echoed
// as it was sent.
func specFor(sw store.Sweep, u core.User) json.RawMessage {
	out := json.RawMessage("{}")
	if spec, err := sweep.Parse(sw.Spec); err == nil {
		var b submitBody
		if decodeJSON(spec.Base, &b) == nil {
			if n, err := storedSpec(spec, b); err == nil {
				out = n
			}
		}
	}
	if u.Role == core.RoleAdmin || u.ID == sw.UserID {
		return out
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(out, &m) != nil {
		return json.RawMessage("{}")
	}
	var base map[string]json.RawMessage
	if json.Unmarshal(m["base"], &base) != nil || base["env"] == nil {
		return out
	}
	var env map[string]json.RawMessage
	if json.Unmarshal(base["env"], &env) == nil {
		for k := range env {
			env[k] = json.RawMessage(`"` + core.MaskedValue + `"`)
		}
		base["env"], _ = json.Marshal(env)
	}
	m["base"], _ = json.Marshal(base)
	masked, _ := json.Marshal(m)
	return masked
}

// groupRows are a sweep's groups as CSV rows: a column per param name
// (sorted), the final reward's n, mean, std, min and max, the group's runs,
// then a column per status.
func groupRows(groups []sweep.Group) [][]string {
	params := make([]map[string]json.RawMessage, len(groups))
	keys := map[string]bool{}
	for i, g := range groups {
		_ = json.Unmarshal(g.Params, &params[i]) // the canonical JSON of an object
		for k := range params[i] {
			keys[k] = true
		}
	}
	names := slices.Sorted(maps.Keys(keys))
	statuses := core.Statuses() // a column each, in their life's order
	head := append(slices.Clone(names), "n", "mean", "std", "min", "max", "runs")
	for _, st := range statuses {
		head = append(head, string(st))
	}
	rows := [][]string{head}
	for i, g := range groups {
		row := make([]string, 0, len(head))
		for _, k := range names {
			row = append(row, csvValue(params[i][k]))
		}
		row = append(row, strconv.Itoa(g.N))
		if f := g.FinalReward; f != nil {
			row = append(row, csvFloat(&f.Mean), csvFloat(&f.Std), csvFloat(&f.Min), csvFloat(&f.Max))
		} else {
			row = append(row, "", "", "", "")
		}
		row = append(row, strconv.Itoa(len(g.Runs)))
		for _, st := range statuses {
			row = append(row, strconv.Itoa(g.Counts[st]))
		}
		rows = append(rows, row)
	}
	return rows
}

// curvesCacheBytes bounds the curves answers kept (answerCache): the
// answer of a 1,000-group sweep of 500 steps is ~22 MiB.
const curvesCacheBytes = 128 << 20

// sweepMetrics is GET /api/sweeps/{id}/metrics?name=: each seed group's
// step-aligned mean ± std curve of metric name (default episode_reward),
// in the groups' order of GET /api/sweeps/{id}.
func (s *Server) sweepMetrics(r *request) *apiError {
	name := strings.TrimSpace(string(r.ctx.QueryArgs().Peek("name")))
	if name == "" {
		name = "episode_reward"
	}
	if len(name) > 128 {
		return errBadRequest("name must be a metric name of at most 128 bytes")
	}
	ctx, cancel := sweepCtx()
	defer cancel()
	// An ended sweep's curves change only with what the version counts:
	// made once, they are reused while it stays.
	key := r.id + "\x00" + name
	var body []byte
	if s.curves.has(key) {
		v, err := s.st.SweepSeriesVersion(ctx, r.id, name)
		if err != nil {
			return storeError(err, "sweep "+r.id)
		}
		body = s.curves.get(key, v)
	}
	if body == nil {
		ms, v, err := s.st.SweepMetrics(ctx, r.id, name)
		if err != nil {
			return storeError(err, "sweep "+r.id)
		}
		in := make([]sweep.Run, len(ms))
		for i, m := range ms {
			in[i] = sweep.Run{ID: m.TaskID, Params: m.Params, Status: m.Status, FinalReward: m.FinalReward, Series: m.Points}
		}
		groups, err := sweep.SummarizeSplit(in, 0, split)
		if err != nil {
			return storeError(err, "sweep "+r.id)
		}
		body = appendCurves(r.id, name, groups)
		s.curves.put(key, v, body)
	}
	r.ctx.SetStatusCode(fasthttp.StatusOK)
	r.ctx.SetContentType("application/json; charset=utf-8")
	// Not copied (tens of MiB on a large sweep): the kept answer never
	// changes (answerCache.put).
	r.ctx.Response.SetBodyRaw(body)
	return nil
}

// appendCurves is the answer of GET /api/sweeps/{id}/metrics:
// {"sweepId","name","groups":[{"params","runs","series":[[step,mean,std,n],...]}]},
// by hand: encoding/json took a third of the answer's time on a large
// sweep (a call per point, each one's output read again). The groups are
// written in ranges at once (split): formatting the floats was a third of
// a 10,000-run sweep's read. Each range writes into its own region of one
// buffer, sized by an estimate, and the regions are then moved together in
// place; joining separate buffers cost as much again (a copy of tens of
// MiB into memory touched for the first time). A range that outgrows its
// region is joined by copy instead.
func appendCurves(id, name string, groups []sweep.Group) []byte {
	str := func(b []byte, s string) []byte { q, _ := json.Marshal(s); return append(b, q...) }
	head := append(str(append(str([]byte(`{"sweepId":`), id), `,"name":`...), name), `,"groups":[`...)
	// at[i] is where group i's region starts, after head.
	at := make([]int, len(groups)+1)
	points := 0
	for i, g := range groups {
		at[i+1] = at[i] + 32 + len(g.Params) + 24*len(g.Runs) + curveBytesPerPoint*len(g.Series)
		points += len(g.Series)
	}
	buf := make([]byte, len(head)+at[len(groups)]+2)
	copy(buf, head)
	parts := make([][]byte, len(groups)) // set at each range's first group
	split(len(groups), points, func(lo, hi int) {
		if lo == hi {
			return
		}
		b := buf[len(head)+at[lo] : len(head)+at[lo] : len(head)+at[hi]]
		for i, g := range groups[lo:hi] {
			if lo+i > 0 {
				b = append(b, ',')
			}
			b = append(append(append(b, `{"params":`...), g.Params...), `,"runs":[`...)
			for j, id := range g.Runs {
				if j > 0 {
					b = append(b, ',')
				}
				b = str(b, id)
			}
			b = append(b, `],"series":[`...)
			for j, p := range g.Series {
				if j > 0 {
					b = append(b, ',')
				}
				b = p.AppendJSON(b)
			}
			b = append(b, "]}"...)
		}
		parts[lo] = b
	})
	pos, moved := len(head), true
	for i, p := range parts {
		if p == nil {
			continue
		}
		// A range that outgrew its region was reallocated: moving it in
		// place would overwrite the next one's.
		if cap(p) != at[nextRange(parts, i)]-at[i] {
			moved = false
			break
		}
	}
	if !moved {
		size := len(head) + 2
		for _, p := range parts {
			size += len(p)
		}
		out := append(make([]byte, 0, size), head...)
		for _, p := range parts {
			out = append(out, p...)
		}
		return append(out, "]}"...)
	}
	for _, p := range parts {
		pos += copy(buf[pos:], p) // forward, within buf: p lies at or after pos
	}
	return append(buf[:pos], "]}"...)
}

// nextRange is the index of the group after the range that starts at i
// (the next range's start, or the end).
func nextRange(parts [][]byte, i int) int {
	for j := i + 1; j < len(parts); j++ {
		if parts[j] != nil {
			return j
		}
	}
	return len(parts)
}

// curveBytesPerPoint is appendCurves' estimate of a point's JSON: ~83
// bytes for six numbers; a variable so that a test can make it too small.
var curveBytesPerPoint = 88

// splitMin is the work (points) below which split runs f on the caller's
// goroutine: starting goroutines costs more than a small sweep saves.
const splitMin = 1 << 16

// split is sweep.SummarizeSplit's: f on contiguous ranges covering 0..n,
// one per CPU at once when work (points) is large, returning after all.
// The master raises GOMAXPROCS above the CPUs (dispatch/procs.go), so the
// CPUs bound it.
func split(n, work int, f func(lo, hi int)) {
	k := min(runtime.GOMAXPROCS(0), runtime.NumCPU(), n)
	if work < splitMin || k <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for j := range k {
		lo, hi := j*n/k, (j+1)*n/k
		wg.Go(func() { f(lo, hi) })
	}
	wg.Wait()
}

// mayChangeSweep: only its owner or an admin may retry or cancel a sweep.
// It returns the sweep it read.
func (s *Server) mayChangeSweep(ctx context.Context, r *request, what string) (store.Sweep, *apiError) {
	sw, err := s.st.Sweep(ctx, r.id)
	if err != nil {
		return sw, storeError(err, "sweep "+r.id)
	}
	if sw.UserID != r.user.ID && r.user.Role != core.RoleAdmin {
		return sw, &apiError{fasthttp.StatusForbidden, codeForbidden, "only the sweep's owner or an admin may " + what + " it"}
	}
	return sw, nil
}

// retrySweep is POST /api/sweeps/{id}/retry: a new run for each member whose
// latest run ended FAILED, CANCELLED or TIMEOUT, with the same spec, owned
// by the sweep's owner; a retried run records rerunOf.
func (s *Server) retrySweep(r *request) *apiError {
	ctx, cancel := sweepCtx()
	defer cancel()
	sw, e := s.mayChangeSweep(ctx, r, "retry")
	if e != nil {
		return e
	}
	// How many members a retry queues is known only inside the store's
	// transaction: room for one is checked, so a retry may pass the cap by
	// the sweep's failed members.
	if e := s.roomInQueue(ctx, sw.UserID, 1); e != nil {
		return e
	}
	now := time.Now()
	n := 0
	runs, err := s.st.RetrySweep(ctx, r.id, func(old core.Task) core.Task {
		t := s.newRun(r, s.specOf(old))
		t.UserID, t.User = old.UserID, old.User // a member is the sweep owner's run
		t.CreatedAt = now.Add(time.Duration(n)) // member order, as at creation
		n++
		return t
	})
	if err != nil {
		return storeError(err, "sweep "+r.id)
	}
	ids := make([]string, len(runs))
	for i, t := range runs {
		ids[i] = t.ID
	}
	if len(ids) > 0 {
		s.ctl.Notify()
	}
	s.log.Info().Str("traceId", r.trace).Str("sweepId", r.id).Int("runs", len(ids)).Int64("userId", r.user.ID).
		Msg("sweep retried")
	r.ctx.Response.Header.Set(signature.HeaderRunsQueued, strconv.Itoa(len(ids)))
	return s.writeJSON(r, fasthttp.StatusAccepted, struct {
		Runs []string `json:"runs"`
	}{ids})
}

// cancelSweep is POST /api/sweeps/{id}/cancel: every member whose latest run
// is still queued or active is cancelled (as POST /api/tasks/{id}/cancel
// does); it answers the runs it asked to stop.
func (s *Server) cancelSweep(r *request) *apiError {
	ctx, cancel := sweepCtx()
	defer cancel()
	if _, e := s.mayChangeSweep(ctx, r, "cancel"); e != nil {
		return e
	}
	runs, err := s.st.SweepRuns(ctx, r.id)
	if err != nil {
		return storeError(err, "sweep "+r.id)
	}
	var todo []string
	for _, t := range runs {
		if !t.Status.Terminal() {
			todo = append(todo, t.ID)
		}
	}
	done := make([]bool, len(todo))
	errs := make([]error, len(todo))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(cancelWorkers, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				_, err := s.ctl.Cancel(ctx, todo[i])
				switch {
				case err == nil:
					done[i] = true
				case !errors.Is(err, core.ErrConflict): // one that ended meanwhile needs nothing
					errs[i] = err
				}
			}
		}()
	}
	for i := range todo {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return storeError(err, "sweep "+r.id)
		}
	}
	ids := []string{}
	for i, id := range todo {
		if done[i] {
			ids = append(ids, id)
		}
	}
	s.log.Info().Str("traceId", r.trace).Str("sweepId", r.id).Int("runs", len(ids)).Int64("userId", r.user.ID).
		Msg("sweep cancel requested")
	return s.writeJSON(r, fasthttp.StatusAccepted, struct {
		ID   string   `json:"id"`
		Runs []string `json:"runs"`
	}{r.id, ids})
}
