package httpapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
)

// Runs that wait for runs (issue 29, API.md "Dependencies"): a submission's
// after and inputsFrom, checked and resolved here (sweeps expanded to their
// members' latest runs), stored with the run; the dependency controller
// (package depctl, Config.Deps) decides the run once its parents end.

// DepDecider decides waiting runs as their parents stand now
// (depctl.Controller.Decide): the REST API asks it of each run it creates
// waiting, so a child of a parent that already failed its condition is
// answered CANCELLED, never left waiting. Safe from any goroutine.
type DepDecider interface {
	Decide(ctx context.Context, ids []string) (int, error)
}

// afterItem is one element of a submission's after: a run or a sweep (or,
// in a pipeline, a step) and the condition.
type afterItem struct {
	Run   string `json:"run,omitempty"`
	Sweep string `json:"sweep,omitempty"`
	Step  string `json:"step,omitempty"`
	When  string `json:"when,omitempty"`
}

// maxInputsFrom bounds inputsFrom: each is a restore of a run's outputs.
const maxInputsFrom = 64

// applyDeps checks the form of b's after and inputsFrom and keeps them in
// sp, for resolveDeps. Step names are a pipeline's (pipelines.go).
func applyDeps(sp *spec, b *submitBody) *apiError {
	if b.After != nil {
		if len(*b.After) > core.MaxParents {
			return errBadRequest("after: %d entries, at most %d", len(*b.After), core.MaxParents)
		}
		items := make([]afterItem, len(*b.After))
		for i, a := range *b.After {
			n := 0
			for _, v := range []string{a.Run, a.Sweep, a.Step} {
				if v != "" {
					n++
				}
			}
			if n != 1 {
				return errBadRequest("after[%d]: give exactly one of run, sweep (or, in a pipeline, step)", i)
			}
			if (a.Run != "" && !core.ValidTaskID(a.Run)) || (a.Sweep != "" && !core.ValidTaskID(a.Sweep)) {
				return errBadRequest("after[%d]: a run or sweep id is 1–64 of [A-Za-z0-9_-]", i)
			}
			if a.When == "" {
				a.When = core.WhenSucceeded
			}
			if !core.ValidWhen(a.When) {
				return errBadRequest("after[%d].when must be succeeded, ended or failed", i)
			}
			items[i] = a
		}
		sp.after, sp.deps = items, nil
	}
	if b.InputsFrom != nil {
		if len(*b.InputsFrom) > maxInputsFrom {
			return errBadRequest("inputsFrom: at most %d runs", maxInputsFrom)
		}
		for i, id := range *b.InputsFrom {
			if !core.ValidTaskID(id) {
				return errBadRequest("inputsFrom[%d] must be a run id (1–64 of [A-Za-z0-9_-])", i)
			}
		}
		sp.inputsFrom = append([]string(nil), *b.InputsFrom...)
	}
	return nil
}

// resolveDeps turns sp's after into the run's parents (sp.deps): each run
// must exist (400) and be u's own unless u is an admin (403); a sweep
// stands for its members' latest runs. Each of inputsFrom must be one of
// the parents, whose outputs u may read. steps resolves a pipeline's step
// names to run ids (nil outside a pipeline).
func (s *Server) resolveDeps(ctx context.Context, u core.User, sp *spec, steps func(name string) (string, bool)) *apiError {
	if len(sp.after) == 0 && len(sp.inputsFrom) == 0 {
		return nil
	}
	var deps []core.Dep
	seen := map[string]int{}
	add := func(d core.Dep) *apiError {
		if i, ok := seen[d.Run]; ok {
			if deps[i].When != d.When {
				return errBadRequest("after: run %s is named twice with different conditions (%s, %s)", d.Run, deps[i].When, d.When)
			}
			return nil
		}
		seen[d.Run] = len(deps)
		deps = append(deps, d)
		if len(deps) > core.MaxParents {
			return errBadRequest("after: more than %d parents (a sweep counts each member)", core.MaxParents)
		}
		return nil
	}
	for i, a := range sp.after {
		switch {
		case a.Step != "":
			if steps == nil {
				return errBadRequest("after[%d].step: steps are named only in a pipeline (POST /api/pipelines)", i)
			}
			id, ok := steps(a.Step)
			if !ok {
				return errBadRequest("after[%d].step: there is no step %q", i, a.Step)
			}
			if e := add(core.Dep{Run: id, When: a.When}); e != nil {
				return e
			}
		case a.Run != "":
			t, err := s.st.Task(ctx, a.Run)
			if errors.Is(err, core.ErrNotFound) {
				return errBadRequest("after[%d].run: there is no run %s", i, a.Run)
			}
			if err != nil {
				return storeError(err, "run "+a.Run)
			}
			if t.UserID != u.ID && u.Role != core.RoleAdmin {
				return &apiError{fasthttp.StatusForbidden, codeForbidden,
					fmt.Sprintf("after[%d].run: run %s is another user's; only an admin may wait for it", i, a.Run)}
			}
			if e := add(core.Dep{Run: a.Run, When: a.When}); e != nil {
				return e
			}
		default:
			sw, err := s.st.Sweep(ctx, a.Sweep)
			if errors.Is(err, core.ErrNotFound) {
				return errBadRequest("after[%d].sweep: there is no sweep %s", i, a.Sweep)
			}
			if err != nil {
				return storeError(err, "sweep "+a.Sweep)
			}
			if sw.UserID != u.ID && u.Role != core.RoleAdmin {
				return &apiError{fasthttp.StatusForbidden, codeForbidden,
					fmt.Sprintf("after[%d].sweep: sweep %s is another user's; only an admin may wait for it", i, a.Sweep)}
			}
			runs, err := s.st.SweepRuns(ctx, a.Sweep)
			if err != nil {
				return storeError(err, "sweep "+a.Sweep)
			}
			for _, t := range runs {
				if e := add(core.Dep{Run: t.ID, Sweep: a.Sweep, When: a.When}); e != nil {
					return e
				}
			}
		}
	}
	for i, id := range sp.inputsFrom {
		step := false
		if steps != nil {
			if rid, ok := steps(id); ok {
				id, step = rid, true
				sp.inputsFrom[i] = rid
			}
		}
		if _, ok := seen[id]; !ok {
			return errBadRequest("inputsFrom[%d]: %s is not one of the runs in after; a run's inputs come from its parents", i, id)
		}
		if !step { // a step's run is the caller's own, and does not exist yet
			t, err := s.st.Task(ctx, id)
			if err != nil {
				return storeError(err, "run "+id)
			}
			if e := s.outputsVisible(u, t); e != nil {
				return &apiError{e.Status, e.Code, fmt.Sprintf("inputsFrom[%d]: %s", i, e.Message)}
			}
		}
	}
	sp.deps = deps
	return nil
}

// decideCreated has the dependency controller decide runs just created
// waiting; the runs not waiting go to the scheduler as before. It returns
// the runs' statuses as they are now, by id, for the answer (a child of a
// failed parent is CANCELLED already).
func (s *Server) decideCreated(ctx context.Context, ts []*core.Task) map[string]core.Status {
	var waiting []string
	for _, t := range ts {
		if t.Waiting {
			waiting = append(waiting, t.ID)
		}
	}
	out := map[string]core.Status{}
	if len(waiting) == 0 || s.cfg.Deps == nil {
		return out
	}
	if _, err := s.cfg.Deps.Decide(ctx, waiting); err != nil {
		// The controller's next pass decides them (DecidableWaiting).
		s.log.Warn().Err(err).Msg("cannot decide new waiting runs now")
	}
	for _, id := range waiting {
		if t, err := s.st.Task(ctx, id); err == nil {
			out[id] = t.Status
		}
	}
	return out
}

// explainWaiting fills the pending code and sentence of the waiting runs
// of ts: they are never in the planner's input (the store keeps them out
// of its window), so the planner has nothing to say of them. The parents
// still going are read in one query.
func (s *Server) explainWaiting(ctx context.Context, ts []core.Task) {
	var ids []string
	for _, t := range ts {
		if t.Status == core.StatusQueued && t.Waiting {
			ids = append(ids, t.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	ps, err := s.st.Parents(ctx, ids)
	if err != nil {
		ps = nil // the sentence names every parent instead
	}
	for i := range ts {
		t := &ts[i]
		if t.Status != core.StatusQueued || !t.Waiting {
			continue
		}
		_, _, on := core.DepVerdict(ps[t.ID])
		t.QueuePosition, t.PendingCode, t.PendingReason = 0, core.ReasonDependency, core.DepPending(t.After, on)
	}
}

// checkDeps resolves sp's after and inputsFrom for a submission outside a
// pipeline.
func (s *Server) checkDeps(u core.User, sp *spec) *apiError {
	ctx, cancel := storeCtx()
	defer cancel()
	return s.resolveDeps(ctx, u, sp, nil)
}
