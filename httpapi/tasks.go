package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

const (
	maxListLimit   = 500
	maxCursorBytes = 1024
	maxMetricNames = 100
)

type submitted struct {
	ID      string      `json:"id"`
	Status  core.Status `json:"status"`
	TraceID string      `json:"traceId"`
	RerunOf string      `json:"rerunOf,omitempty"`
}

// submit is POST /api/train.
func (s *Server) submit(r *request) *apiError {
	body := r.ctx.PostBody()
	if len(bytes.TrimSpace(body)) == 0 {
		return errBadRequest("send a JSON object with command (argv array) or algorithm")
	}
	var b submitBody
	if e := decodeJSON(body, &b); e != nil {
		return e
	}
	sp := newSpec()
	if e := s.apply(&sp, &b); e != nil {
		return e
	}
	if e := priorityAllowed(r.user, b.Priority); e != nil {
		return e
	}
	if e := s.checkResumeFrom(r.user, &sp); e != nil {
		return e
	}
	if e := s.checkDeps(r.user, &sp); e != nil {
		return e
	}
	if sp.name == "" {
		sp.name = sp.defaultName()
	}
	return s.create(r, sp, "")
}

// rerunTask is POST /api/tasks/{id}/rerun: a new run with the spec of {id},
// fields of an optional body overriding it, owned by the caller.
func (s *Server) rerunTask(r *request) *apiError {
	ctx, cancel := storeCtx()
	defer cancel()
	orig, err := s.st.Task(ctx, r.id)
	if err != nil {
		return storeError(err, "run "+r.id)
	}
	sp := s.specOf(orig)
	if !orig.EnvVisibleTo(r.user) {
		// Another user's env values and diff are not theirs to reuse (nor
		// to read through the rerun's code.diff).
		sp.env = nil
		if sp.code.DiffID != "" {
			sp.code.DiffID, sp.code.HasDiff = "", false
			sp.code.DiffOmitted = "the diff of run " + orig.ID + " is shown only to its owner and admins"
		}
	}
	if orig.SweepID != "" {
		// A rerun is a run of its own, outside the sweep (a sweep's retry
		// makes members' new runs): it does not carry the sweep's tag.
		sp.tags = slices.DeleteFunc(slices.Clone(sp.tags), func(t string) bool { return t == core.SweepTag(orig.SweepID) })
	}
	if body := r.ctx.PostBody(); len(bytes.TrimSpace(body)) > 0 {
		var b submitBody
		if e := decodeJSON(body, &b); e != nil {
			return e
		}
		if e := s.apply(&sp, &b); e != nil {
			return e
		}
		if e := priorityAllowed(r.user, b.Priority); e != nil {
			return e
		}
	}
	if e := s.checkResumeFrom(r.user, &sp); e != nil {
		return e
	}
	if e := s.checkDeps(r.user, &sp); e != nil {
		return e
	}
	if sp.name == "" {
		sp.name = sp.defaultName()
	}
	return s.create(r, sp, orig.ID)
}

// newRun is a new QUEUED run of sp owned by the caller, made within the
// request r (its trace id); nothing is stored yet. The paths that make a
// run of the caller's go through it (submit, rerun, sweep, sweep retry,
// pipeline), its priority clamped by clampPriority.
func (s *Server) newRun(r *request, sp spec) core.Task {
	return s.runOf(r.user, r.trace, clampPriority(r.user, sp))
}

// clampPriority is where a priority is clamped, on every path that makes a
// run (newRun; a pipeline's retry and a sweep's proposals, whose runs stay
// their owner's): made by (or for) u who is not an admin, a run has at most
// priority 0, whatever the spec inherited (an admin's rerun, a member or
// step an admin raised); an explicit priority above 0 was refused before,
// with priorityAllowed's message.
func clampPriority(u core.User, sp spec) spec {
	if u.Role != core.RoleAdmin {
		sp.priority = min(sp.priority, 0)
	}
	return sp
}

// runOf is a new QUEUED run of sp owned by u, under trace, with the
// master's resource defaults filled in; sp is checked.
func (s *Server) runOf(u core.User, trace string, sp spec) core.Task {
	t := core.Task{
		ID:             core.NewTaskID(),
		Name:           sp.name,
		Project:        sp.project,
		User:           u.Username,
		UserID:         u.ID,
		Status:         core.StatusQueued,
		Attempt:        1,
		MaxRetries:     sp.retries,
		Command:        sp.argv(),
		Params:         sp.params,
		GPUs:           sp.gpus,
		Priority:       sp.priority,
		Env:            sp.env,
		Tags:           sp.tags,
		Workdir:        sp.workdir,
		TraceID:        trace,
		TimeoutSeconds: sp.timeout,
		Code:           sp.code,
		ResumeFrom:     sp.resumeFrom,

		Preemptible:         sp.preemptible,
		PreemptGraceSeconds: sp.grace,
		Private:             sp.private,
		Python:              sp.python,
		Image:               sp.image,
		CPUs:                sp.cpus,
		MemoryMB:            sp.memoryMB,
		GPUFraction:         sp.gpuFraction,
		GPUMemoryMB:         sp.gpuMemoryMB,
		GPUType:             sp.gpuType,
		Constraints:         sp.constraints,
		After:               sp.deps,
		InputsFrom:          sp.inputsFrom,
		Nodes:               sp.nodes,
	}
	s.cfg.Resources.Fill(&t)
	t.Kind = core.KindBatch
	if sp.kind == core.KindInteractive {
		t.Kind = core.KindInteractive
	}
	if t.Env == nil {
		t.Env = map[string]string{}
	}
	if sp.noRecord || sp.port != 0 {
		env := maps.Clone(t.Env) // sp.env may be another run's
		if sp.noRecord {
			env[core.RecordEnv] = "0"
		}
		if sp.port != 0 {
			env[core.PortEnv] = strconv.Itoa(sp.port)
			env[core.BaseURLEnv] = core.SessionPath(t.ID)
		}
		t.Env = env
	}
	if t.Tags == nil {
		t.Tags = []string{}
	}
	return t
}

// roomInQueue is nil when user may queue n more runs under
// MAX_QUEUED_PER_USER, else the 409 that says so. Every path that queues
// runs asks it (submit, rerun, sweep, sweep retry). Two submissions at
// once may both pass it: the cap bounds a queue, it is not a count kept
// exactly.
//
// The store's count costs a read of the user's queued runs (0.9 ms at
// 10,000 on SQLite), too much for every submission: a count read less
// than queueCountTTL ago, plus what this master queued since, serves
// while it stays under the cap, and only a count that would pass it is
// read again before the refusal.
func (s *Server) roomInQueue(ctx context.Context, userID int64, n int) *apiError {
	max := s.cfg.MaxQueuedPerUser
	if max <= 0 {
		return nil
	}
	now := time.Now()
	s.queued.mu.Lock()
	c, ok := s.queued.m[userID]
	s.queued.mu.Unlock()
	if !ok || now.Sub(c.at) >= queueCountTTL || c.n+n > max {
		have, err := s.st.QueuedCount(ctx, userID)
		if err != nil {
			return storeError(err, "queued runs")
		}
		c = queueCount{n: have, at: now}
	}
	refused := c.n+n > max
	if !refused {
		c.n += n
	}
	s.queued.mu.Lock()
	s.queued.m[userID] = c
	s.queued.mu.Unlock()
	if refused {
		return &apiError{fasthttp.StatusConflict, codeConflict, fmt.Sprintf(
			"this would make %d queued runs of yours, over this server's limit of %d (MAX_QUEUED_PER_USER): wait for some to start, or cancel some",
			c.n+n, max)}
	}
	return nil
}

// queueCountTTL is how long roomInQueue trusts a user's queued count.
const queueCountTTL = time.Second

// queueCounts are users' queued counts as roomInQueue last knew them.
type queueCounts struct {
	mu sync.Mutex
	m  map[int64]queueCount
}

type queueCount struct {
	n  int
	at time.Time
}

// create stores a new QUEUED run of sp owned by the caller (a rerun of
// run rerunOf when that is set), wakes the scheduler and answers 202.
func (s *Server) create(r *request, sp spec, rerunOf string) *apiError {
	t := s.newRun(r, sp)
	t.RerunOf = rerunOf
	ctx, cancel := storeCtx()
	defer cancel()
	if e := s.roomForSession(ctx, r.user, t); e != nil {
		return e
	}
	if e := s.roomInQueue(ctx, r.user.ID, 1); e != nil {
		return e
	}
	if len(sp.diff) > 0 {
		id, err := s.st.PutCodeDiff(ctx, sp.diff)
		if err != nil {
			return storeError(err, "code diff")
		}
		t.Code.DiffID, t.Code.HasDiff = id, true
	}
	if err := s.st.CreateTask(ctx, &t); err != nil {
		return storeError(err, "run")
	}
	if t.Waiting {
		if st, ok := s.decideCreated(ctx, []*core.Task{&t})[t.ID]; ok {
			t.Status = st
		}
	} else {
		s.ctl.Queued(t)
	}
	s.log.Info().Str("traceId", r.trace).Str("taskId", t.ID).Int64("userId", t.UserID).
		Str("rerunOf", rerunOf).Msg("run queued")
	return s.writeJSON(r, fasthttp.StatusAccepted, submitted{t.ID, t.Status, t.TraceID, rerunOf})
}

// listTasks is GET /api/tasks (find.go reads its filters); with
// ?format=csv the page is a CSV table.
func (s *Server) listTasks(r *request) *apiError {
	f, csvOut, e := runFilter(r.ctx.QueryArgs())
	if e != nil {
		return e
	}
	ctx, cancel := storeCtx()
	defer cancel()
	items, next, err := s.st.ListTasks(ctx, f)
	if err != nil {
		if isBadCursor(err) {
			return errBadRequest("malformed cursor: pass nextCursor of a previous page")
		}
		return storeError(err, "runs")
	}
	views := make([]core.Task, 0, len(items))
	for _, t := range items {
		views = append(views, t.ViewFor(r.user))
	}
	if csvOut {
		return s.writeRunsCSV(r, views, next)
	}
	s.explainQueue(ctx, views)
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		Items      []core.Task `json:"items"`
		NextCursor string      `json:"nextCursor"`
	}{views, next})
}

// isBadCursor reports whether a ListTasks error blames the cursor.
func isBadCursor(err error) bool {
	return errors.Is(err, store.ErrBadCursor)
}

// getTask is GET /api/tasks/{id}.
func (s *Server) getTask(r *request) *apiError {
	ctx, cancel := storeCtx()
	defer cancel()
	t, err := s.st.Task(ctx, r.id)
	if err != nil {
		return storeError(err, "run "+r.id)
	}
	v := []core.Task{t.ViewFor(r.user)}
	s.explainQueue(ctx, v)
	return s.writeJSON(r, fasthttp.StatusOK, v[0])
}

// cancelTask is POST /api/tasks/{id}/cancel: owner or admin only.
func (s *Server) cancelTask(r *request) *apiError {
	ctx, cancel := storeCtx()
	defer cancel()
	t, err := s.st.Task(ctx, r.id)
	if err != nil {
		return storeError(err, "run "+r.id)
	}
	if t.UserID != r.user.ID && r.user.Role != core.RoleAdmin {
		return &apiError{fasthttp.StatusForbidden, codeForbidden, "only the run's owner or an admin may cancel it"}
	}
	if t.Status.Terminal() {
		return &apiError{fasthttp.StatusConflict, codeConflict, "run " + t.ID + " already finished (" + string(t.Status) + ")"}
	}
	nt, err := s.ctl.Cancel(ctx, t.ID)
	if err != nil {
		if errors.Is(err, core.ErrConflict) {
			return &apiError{fasthttp.StatusConflict, codeConflict, "run " + t.ID + " already finished"}
		}
		return storeError(err, "run "+t.ID)
	}
	s.log.Info().Str("traceId", r.trace).Str("taskId", t.ID).Int64("userId", r.user.ID).Msg("run cancel requested")
	return s.writeJSON(r, fasthttp.StatusAccepted, nt.ViewFor(r.user))
}

// taskMetrics is GET /api/tasks/{id}/metrics?names=a,b[&times=true]: with
// times, each point is [step, value, t] (t the Unix ms it was logged at,
// null when not known); without, the contract's pairs.
func (s *Server) taskMetrics(r *request) *apiError {
	var names []string
	for _, n := range strings.Split(string(r.ctx.QueryArgs().Peek("names")), ",") {
		if n = strings.TrimSpace(n); n != "" {
			if len(n) > 128 {
				return errBadRequest("metric names must be at most 128 bytes")
			}
			names = append(names, n)
		}
	}
	if len(names) > maxMetricNames {
		return errBadRequest("at most %d metric names", maxMetricNames)
	}
	times := false
	switch v := string(r.ctx.QueryArgs().Peek("times")); v {
	case "", "false":
	case "true":
		times = true
	default:
		return errBadRequest("times must be true or false")
	}
	ctx, cancel := storeCtx()
	defer cancel()
	if _, err := s.st.Task(ctx, r.id); err != nil {
		return storeError(err, "run "+r.id)
	}
	if times {
		series, err := s.st.MetricsTimed(ctx, r.id, names)
		if err != nil {
			return storeError(err, "metrics of run "+r.id)
		}
		out := make(map[string][][3]any, len(series))
		for name, pts := range series {
			ps := make([][3]any, 0, len(pts))
			for _, p := range pts {
				ps = append(ps, [3]any{finiteOrNil(p[0]), finiteOrNil(p[1]), finiteOrNil(p[2])})
			}
			out[name] = ps
		}
		return s.writeJSON(r, fasthttp.StatusOK, struct {
			TaskID string              `json:"taskId"`
			Series map[string][][3]any `json:"series"`
		}{r.id, out})
	}
	series, err := s.st.Metrics(ctx, r.id, names)
	if err != nil {
		return storeError(err, "metrics of run "+r.id)
	}
	out := make(map[string][][2]any, len(series))
	for name, pts := range series {
		ps := make([][2]any, 0, len(pts))
		for _, p := range pts {
			ps = append(ps, [2]any{finiteOrNil(p[0]), finiteOrNil(p[1])})
		}
		out[name] = ps
	}
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		TaskID string              `json:"taskId"`
		Series map[string][][2]any `json:"series"`
	}{r.id, out})
}

// codeDiff is GET /api/tasks/{id}/code.diff: the `git diff HEAD` the run
// was submitted with, to those who may see its env values (a diff can hold
// secrets just as well).
func (s *Server) codeDiff(r *request) *apiError {
	ctx, cancel := storeCtx()
	defer cancel()
	t, err := s.st.Task(ctx, r.id)
	if err != nil {
		return storeError(err, "run "+r.id)
	}
	if t.Code.DiffID == "" {
		why := "run " + t.ID + " has no stored diff"
		if t.Code.DiffOmitted != "" {
			why += ": " + t.Code.DiffOmitted
		} else if !t.Code.GitDirty {
			why += " (its work tree was clean, or no git repository)"
		}
		return &apiError{fasthttp.StatusNotFound, codeNotFound, why}
	}
	if !t.EnvVisibleTo(r.user) {
		return &apiError{fasthttp.StatusForbidden, codeForbidden,
			"only the run's owner or an admin may read its diff (it may hold secrets, as env values do)"}
	}
	etag := `"` + t.Code.DiffID + `"`
	cache := func() {
		r.ctx.Response.Header.Set(fasthttp.HeaderETag, etag)
		r.ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "private, no-cache")
	}
	if inm := string(r.ctx.Request.Header.Peek(fasthttp.HeaderIfNoneMatch)); inm != "" && etagMatches(inm, etag) {
		cache()
		r.ctx.SetStatusCode(fasthttp.StatusNotModified)
		return nil
	}
	diff, err := s.st.CodeDiff(ctx, t.Code.DiffID)
	if err != nil {
		return storeError(err, "diff of run "+t.ID)
	}
	cache()
	r.ctx.SetStatusCode(fasthttp.StatusOK)
	r.ctx.SetContentType("text/x-diff; charset=utf-8")
	r.ctx.Response.Header.Set("Content-Disposition", `inline; filename="`+t.ID+`.diff"`)
	// The bytes are the submitter's: never sniffed into a page, never
	// scripted should a browser open them.
	r.ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	r.ctx.Response.Header.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	r.ctx.SetBody(diff)
	return nil
}

// etagMatches reports whether an If-None-Match value names etag (or is *).
func etagMatches(header, etag string) bool {
	for _, v := range strings.Split(header, ",") {
		v = strings.TrimPrefix(strings.TrimSpace(v), "W/")
		if v == "*" || v == etag {
			return true
		}
	}
	return false
}

func finiteOrNil(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return v
}
