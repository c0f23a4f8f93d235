package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/signature"
	"github.com/rlsched/rlsched/store"
)

// Pipelines (issue 29, API.md "Pipelines"): steps, each a submission
// whose after (and inputsFrom) may name other steps, submitted as one
// unit (store.CreatePipeline: one transaction); a retry reruns the steps
// that did not succeed and those after them, wired to the kept parents.

// maxPipelineSteps bounds a pipeline.
const maxPipelineSteps = 1000

var stepNameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// pipelineBody is POST /api/pipelines's body: each step is a submission
// (its name is the step's, and its run's) whose after may name steps.
type pipelineBody struct {
	Name  string            `json:"name"`
	Steps []json.RawMessage `json:"steps"`
}

func newPipelineID() string { return "p" + core.NewTaskID()[1:] }

// createPipeline is POST /api/pipelines.
func (s *Server) createPipeline(r *request) *apiError {
	var b pipelineBody
	if e := decodeJSON(r.ctx.PostBody(), &b); e != nil {
		return e
	}
	if utf8.RuneCountInString(b.Name) > maxNameChars {
		return errBadRequest("name must be at most %d characters", maxNameChars)
	}
	if len(b.Steps) == 0 || len(b.Steps) > maxPipelineSteps {
		return errBadRequest("steps: give 1..%d steps, not %d", maxPipelineSteps, len(b.Steps))
	}
	bodies := make([]submitBody, len(b.Steps))
	index := make(map[string]int, len(b.Steps))
	for i, raw := range b.Steps {
		if e := decodeJSON(raw, &bodies[i]); e != nil {
			return prefixed(fmt.Sprintf("steps[%d]", i), e)
		}
		name := ""
		if bodies[i].Name != nil {
			name = *bodies[i].Name
		}
		if !stepNameRe.MatchString(name) {
			return errBadRequest("steps[%d].name must be 1–128 of [A-Za-z0-9_.-]", i)
		}
		if j, dup := index[name]; dup {
			return errBadRequest("steps[%d].name: %q is also the name of steps[%d]", i, name, j)
		}
		index[name] = i
	}
	if e := checkStepGraph(bodies, index); e != nil {
		return e
	}
	ids := make([]string, len(bodies))
	for i := range ids {
		ids[i] = core.NewTaskID()
	}
	stepRun := func(name string) (string, bool) {
		i, ok := index[name]
		if !ok {
			return "", false
		}
		return ids[i], true
	}
	ctx, cancel := sweepCtx()
	defer cancel()
	runs := make([]*core.Task, len(bodies))
	steps := make([]store.PipelineStep, len(bodies))
	now := time.Now()
	for i := range bodies {
		field := fmt.Sprintf("steps[%d]", i)
		sp := newSpec()
		if e := s.apply(&sp, &bodies[i]); e != nil {
			return prefixed(field, e)
		}
		if e := priorityAllowed(r.user, bodies[i].Priority); e != nil {
			return prefixed(field, e)
		}
		if e := s.checkResumeFrom(r.user, &sp); e != nil {
			return prefixed(field, e)
		}
		if e := s.resolveDeps(ctx, r.user, &sp, stepRun); e != nil {
			return prefixed(field, e)
		}
		if len(sp.diff) > 0 {
			return errBadRequest("%s.code.diff: a pipeline's steps cannot carry a diff; submit the code as a snapshot or commit it", field)
		}
		t := s.newRun(r, sp)
		t.ID = ids[i]
		t.CreatedAt = now.Add(time.Duration(i)) // the file's order in the queue
		runs[i], steps[i] = &t, store.PipelineStep{Name: sp.name}
	}
	if e := s.roomInQueue(ctx, r.user.ID, len(runs)); e != nil {
		return e
	}
	p := &store.Pipeline{ID: newPipelineID(), Name: b.Name, UserID: r.user.ID, CreatedAt: now, Steps: steps}
	if err := s.st.CreatePipeline(ctx, p, runs); err != nil {
		return storeError(err, "pipeline")
	}
	s.decideCreated(ctx, runs)
	s.ctl.Notify()
	s.log.Info().Str("traceId", r.trace).Str("pipelineId", p.ID).Int("steps", len(runs)).Int64("userId", r.user.ID).Msg("pipeline queued")
	r.ctx.Response.Header.Set(signature.HeaderRunsQueued, strconv.Itoa(len(runs)))
	out := make(map[string]string, len(steps))
	for _, st := range p.Steps {
		out[st.Name] = st.RunID
	}
	return s.writeJSON(r, fasthttp.StatusAccepted, struct {
		ID   string            `json:"id"`
		Runs map[string]string `json:"runs"`
	}{p.ID, out})
}

// checkStepGraph refuses a step's after or inputsFrom naming no step, and
// a cycle (naming the steps on it).
func checkStepGraph(bodies []submitBody, index map[string]int) *apiError {
	next := make([][]int, len(bodies)) // parent -> children
	for i, b := range bodies {
		if b.After == nil {
			continue
		}
		for k, a := range *b.After {
			if a.Step == "" {
				continue
			}
			j, ok := index[a.Step]
			if !ok {
				return errBadRequest("steps[%d].after[%d].step: there is no step %q", i, k, a.Step)
			}
			if j == i {
				return errBadRequest("steps[%d].after[%d].step: a step cannot wait for itself", i, k)
			}
			next[j] = append(next[j], i)
		}
	}
	// Depth-first, colours: 0 new, 1 on the path, 2 done.
	colour := make([]int8, len(bodies))
	var path []int
	var cycle []int
	var visit func(i int) bool
	visit = func(i int) bool {
		colour[i] = 1
		path = append(path, i)
		for _, c := range next[i] {
			if colour[c] == 1 {
				at := slices.Index(path, c)
				cycle = append(slices.Clone(path[at:]), c)
				return false
			}
			if colour[c] == 0 && !visit(c) {
				return false
			}
		}
		path = path[:len(path)-1]
		colour[i] = 2
		return true
	}
	for i := range bodies {
		if colour[i] == 0 && !visit(i) {
			names := make([]string, len(cycle))
			for k, c := range cycle {
				names[k] = *bodies[c].Name
			}
			return errBadRequest("steps[%d].after: the steps wait for one another in a cycle: %s", cycle[0], strings.Join(names, " → "))
		}
	}
	return nil
}

// pipelineStep is a step in GET /api/pipelines/{id}.
type pipelineStep struct {
	Name   string      `json:"name"`
	Run    string      `json:"run"`
	Status core.Status `json:"status"`
	// After are the steps it waits for, by name; Depth its layer (0: waits
	// for no step; else one more than its deepest parent).
	After         []string `json:"after"`
	Depth         int      `json:"depth"`
	Reason        string   `json:"reason,omitempty"`
	PendingReason string   `json:"pendingReason,omitempty"`
}

type pipelineAnswer struct {
	ID        string              `json:"id"`
	Name      string              `json:"name"`
	User      string              `json:"user"`
	CreatedAt time.Time           `json:"createdAt"`
	Steps     []pipelineStep      `json:"steps"`
	Counts    map[core.Status]int `json:"counts"`
}

// pipelineState reads pipeline id and its steps' latest runs.
func (s *Server) pipelineState(ctx context.Context, id string) (store.Pipeline, []core.Task, *apiError) {
	p, err := s.st.Pipeline(ctx, id)
	if err != nil {
		return p, nil, storeError(err, "pipeline "+id)
	}
	runs := make([]core.Task, len(p.Steps))
	for i, st := range p.Steps {
		if runs[i], err = s.st.Task(ctx, st.RunID); err != nil {
			return p, nil, storeError(err, "run "+st.RunID)
		}
	}
	return p, runs, nil
}

// stepParents are the steps each step waits for (by index), read off its
// latest run's after: a retried step's run names the runs its parents
// have now.
func stepParents(p store.Pipeline, runs []core.Task) [][]int {
	stepOf := make(map[string]int, len(p.Steps))
	for i, st := range p.Steps {
		stepOf[st.RunID] = i
	}
	out := make([][]int, len(runs))
	for i, t := range runs {
		for _, d := range t.After {
			if j, ok := stepOf[d.Run]; ok {
				out[i] = append(out[i], j)
			}
		}
	}
	return out
}

// getPipeline is GET /api/pipelines/{id}.
func (s *Server) getPipeline(r *request) *apiError {
	ctx, cancel := sweepCtx()
	defer cancel()
	p, runs, e := s.pipelineState(ctx, r.id)
	if e != nil {
		return e
	}
	s.explainWaiting(ctx, runs)
	parents := stepParents(p, runs)
	depth := make([]int, len(runs))
	var depthOf func(i int, seen int) int
	depthOf = func(i, seen int) int {
		if depth[i] > 0 || len(parents[i]) == 0 || seen > len(runs) {
			return depth[i]
		}
		d := 0
		for _, j := range parents[i] {
			d = max(d, depthOf(j, seen+1)+1)
		}
		depth[i] = d
		return d
	}
	ans := pipelineAnswer{ID: p.ID, Name: p.Name, User: p.User, CreatedAt: p.CreatedAt, Counts: zeroCounts()}
	for i, t := range runs {
		after := make([]string, 0, len(parents[i]))
		for _, j := range parents[i] {
			after = append(after, p.Steps[j].Name)
		}
		ans.Steps = append(ans.Steps, pipelineStep{Name: p.Steps[i].Name, Run: t.ID, Status: t.Status, After: after,
			Depth: depthOf(i, 0), Reason: t.Reason, PendingReason: t.PendingReason})
		ans.Counts[t.Status]++
	}
	return s.writeJSON(r, fasthttp.StatusOK, ans)
}

// retryPipeline is POST /api/pipelines/{id}/retry: a new run for each step
// whose run ended without succeeding, and for each step after one of them
// that ended too, wired to the runs of the steps kept. Steps still going
// are left alone.
func (s *Server) retryPipeline(r *request) *apiError {
	ctx, cancel := sweepCtx()
	defer cancel()
	p, runs, e := s.pipelineState(ctx, r.id)
	if e != nil {
		return e
	}
	if p.UserID != r.user.ID && r.user.Role != core.RoleAdmin {
		return &apiError{fasthttp.StatusForbidden, codeForbidden, "only the pipeline's owner or an admin may retry it"}
	}
	parents := stepParents(p, runs)
	children := make([][]int, len(runs))
	for i, ps := range parents {
		for _, j := range ps {
			children[j] = append(children[j], i)
		}
	}
	redo := make([]bool, len(runs))
	var mark func(i int)
	mark = func(i int) {
		if redo[i] || !runs[i].Status.Terminal() {
			return
		}
		redo[i] = true
		for _, c := range children[i] {
			mark(c)
		}
	}
	for i, t := range runs {
		if t.Status.Terminal() && t.Status != core.StatusSucceeded {
			mark(i)
		}
	}
	newID := map[string]string{} // old run -> its step's new run
	var idx []int
	var was []string
	for i, t := range runs {
		if redo[i] {
			newID[t.ID] = core.NewTaskID()
			idx, was = append(idx, i), append(was, t.ID)
		}
	}
	if len(idx) == 0 {
		return &apiError{fasthttp.StatusConflict, codeConflict, "nothing to retry: every step succeeded or is still going"}
	}
	if e := s.roomInQueue(ctx, p.UserID, len(idx)); e != nil {
		return e
	}
	owner := core.User{ID: p.UserID, Username: p.User, Role: core.RoleUser}
	now := time.Now()
	created := make([]*core.Task, 0, len(idx))
	for n, i := range idx {
		old := runs[i]
		sp := s.specOf(old)
		sp.deps = make([]core.Dep, len(old.After))
		for k, d := range old.After {
			if id, ok := newID[d.Run]; ok {
				d.Run = id
			}
			sp.deps[k] = d
		}
		for _, in := range old.InputsFrom {
			if id, ok := newID[in]; ok {
				in = id
			}
			sp.inputsFrom = append(sp.inputsFrom, in)
		}
		t := s.runOf(owner, r.trace, clampPriority(r.user, sp))
		t.ID, t.RerunOf, t.CreatedAt = newID[old.ID], old.ID, now.Add(time.Duration(n))
		created = append(created, &t)
	}
	if err := s.st.RetryPipeline(ctx, p.ID, idx, was, created); err != nil {
		if errors.Is(err, core.ErrConflict) {
			return &apiError{fasthttp.StatusConflict, codeConflict, "another retry of this pipeline came first; read it again"}
		}
		return storeError(err, "pipeline "+p.ID)
	}
	s.decideCreated(ctx, created)
	s.ctl.Notify()
	out := make(map[string]string, len(idx))
	for k, i := range idx {
		out[p.Steps[i].Name] = created[k].ID
	}
	s.log.Info().Str("traceId", r.trace).Str("pipelineId", p.ID).Int("steps", len(idx)).Int64("userId", r.user.ID).Msg("pipeline retried")
	r.ctx.Response.Header.Set(signature.HeaderRunsQueued, strconv.Itoa(len(idx)))
	return s.writeJSON(r, fasthttp.StatusAccepted, struct {
		ID   string            `json:"id"`
		Runs map[string]string `json:"runs"`
	}{p.ID, out})
}
