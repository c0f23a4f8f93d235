package httpapi

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
)

// The scheduling policy's REST side (API.md "Scheduling policy"): who may
// give which priority, an admin's change of a queued run's priority.

// priorityAllowed refuses a priority above 0 from a caller who is not an
// admin: a USER may only step behind their own runs (priority ≤ 0).
func priorityAllowed(u core.User, p *int64) *apiError {
	if p == nil || *p <= 0 || u.Role == core.RoleAdmin {
		return nil
	}
	return &apiError{fasthttp.StatusForbidden, codeForbidden,
		fmt.Sprintf("priority %d is for admins: a user may submit priority 0 or below", *p)}
}

// setPriority is POST /api/tasks/{id}/priority {"priority":n} (admins
// only): a QUEUED run's new place in the order.
func (s *Server) setPriority(r *request) *apiError {
	body := r.ctx.PostBody()
	if len(bytes.TrimSpace(body)) == 0 {
		return errBadRequest(`send {"priority": n}`)
	}
	var b struct {
		Priority *int64 `json:"priority"`
	}
	if e := decodeJSON(body, &b); e != nil {
		return e
	}
	if b.Priority == nil {
		return errBadRequest(`priority is missing: send {"priority": n}`)
	}
	if *b.Priority < -maxPriority || *b.Priority > maxPriority {
		return errBadRequest("priority must be -%d..%d", maxPriority, maxPriority)
	}
	ctx, cancel := storeCtx()
	defer cancel()
	t, err := s.st.SetPriority(ctx, r.id, int(*b.Priority))
	if err != nil {
		if errors.Is(err, core.ErrConflict) {
			return &apiError{fasthttp.StatusConflict, codeConflict,
				"run " + r.id + " is no longer QUEUED: only a queued run's priority can change"}
		}
		return storeError(err, "run "+r.id)
	}
	s.ctl.Notify() // the order changed
	s.log.Info().Str("traceId", r.trace).Str("taskId", t.ID).Int("priority", t.Priority).
		Int64("userId", r.user.ID).Msg("run priority set")
	v := []core.Task{t.ViewFor(r.user)}
	s.explainQueue(ctx, v)
	return s.writeJSON(r, fasthttp.StatusOK, v[0])
}

// effectiveQuota is q with DefaultGPUQuota for a user without a GPU cap.
func (s *Server) effectiveQuota(q core.Quota) core.Quota {
	if q.GPUs == nil && s.cfg.DefaultGPUQuota > 0 {
		n := s.cfg.DefaultGPUQuota
		q.GPUs = &n
	}
	return q
}

// usersUsage is GET /api/users/usage: every user's fair-share usage
// (GPU-seconds, decayed), what they have active (DISPATCHED + RUNNING) and
// their quota, lowest usage first (the fair-share order).
func (s *Server) usersUsage(r *request) *apiError {
	ctx, cancel := storeCtx()
	defer cancel()
	us, err := s.st.Usage(ctx, s.cfg.Now(), s.cfg.FairShareHalfLife)
	if err != nil {
		return storeError(err, "usage")
	}
	items := make([]core.UserUsage, 0, len(us))
	for _, u := range us {
		items = append(items, core.UserUsage{User: u.User, Usage: math.Round(u.Usage*1000) / 1000,
			RunningGPUs: u.ActiveGPUs, RunningRuns: u.ActiveRuns, Quota: s.effectiveQuota(u.Quota)})
	}
	slices.SortStableFunc(items, func(a, b core.UserUsage) int { return cmp.Compare(a.Usage, b.Usage) })
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		Items []core.UserUsage `json:"items"`
	}{items})
}

// Bounds of a quota (PUT /api/admin/quotas/{username}).
const (
	maxQuotaGPUs = 1_000_000
	maxQuotaRuns = 1_000_000
)

// quotaItem is a user's quota in the admin endpoints; null is no cap.
type quotaItem struct {
	User string `json:"user"`
	GPUs *int   `json:"gpus"`
	Runs *int   `json:"runs"`
}

// listQuotas is GET /api/admin/quotas (admins): every user's own quota,
// null where none is set (DEFAULT_USER_GPU_QUOTA then caps GPUs; GET
// /api/users/usage shows the quota that applies).
func (s *Server) listQuotas(r *request) *apiError {
	ctx, cancel := storeCtx()
	defer cancel()
	us, err := s.st.Usage(ctx, s.cfg.Now(), s.cfg.FairShareHalfLife)
	if err != nil {
		return storeError(err, "quotas")
	}
	items := make([]quotaItem, 0, len(us))
	for _, u := range us {
		items = append(items, quotaItem{User: u.User, GPUs: u.Quota.GPUs, Runs: u.Quota.Runs})
	}
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		Items []quotaItem `json:"items"`
	}{items})
}

// putQuota is PUT /api/admin/quotas/{username} {"gpus":n|null,"runs":n|null}
// (admins): the user's quota replaced whole; an absent field is null.
func (s *Server) putQuota(r *request) *apiError {
	body := r.ctx.PostBody()
	if len(bytes.TrimSpace(body)) == 0 {
		return errBadRequest(`send {"gpus": n|null, "runs": n|null}`)
	}
	var b struct {
		GPUs *int64 `json:"gpus"`
		Runs *int64 `json:"runs"`
	}
	if e := decodeJSON(body, &b); e != nil {
		return e
	}
	var q core.Quota
	for _, f := range []struct {
		name string
		v    *int64
		max  int64
		dst  **int
	}{{"gpus", b.GPUs, maxQuotaGPUs, &q.GPUs}, {"runs", b.Runs, maxQuotaRuns, &q.Runs}} {
		if f.v == nil {
			continue
		}
		if *f.v < 0 || *f.v > f.max {
			return errBadRequest("%s must be 0..%d, or null for no cap", f.name, f.max)
		}
		n := int(*f.v)
		*f.dst = &n
	}
	u, e := s.userOfPath(r)
	if e != nil {
		return e
	}
	ctx, cancel := storeCtx()
	defer cancel()
	if err := s.st.SetQuota(ctx, u.ID, q); err != nil {
		return storeError(err, "user "+u.Username)
	}
	s.ctl.Notify() // a raised quota may let runs start
	s.log.Info().Str("traceId", r.trace).Str("user", u.Username).Int64("adminId", r.user.ID).Msg("quota set")
	return s.writeJSON(r, fasthttp.StatusOK, quotaItem{User: u.Username, GPUs: q.GPUs, Runs: q.Runs})
}

// Bounds of GET /api/queue.
const (
	defaultQueueLimit = 500
	maxQueueLimit     = 2000
)

// queue is GET /api/queue?limit=: the QUEUED runs in the order the
// scheduler will serve them, each with its position and why it waits. Runs
// already being placed (position 0, "starting on …") come first; runs the
// explanation does not reach come last, in the store's order.
func (s *Server) queue(r *request) *apiError {
	limit := defaultQueueLimit
	if v := r.ctx.QueryArgs().Peek("limit"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 {
			return errBadRequest("limit must be a positive integer")
		}
		limit = min(n, maxQueueLimit)
	}
	ctx, cancel := storeCtx()
	defer cancel()
	ts, err := s.st.QueuedTasks(ctx, limit)
	if err != nil {
		return storeError(err, "queue")
	}
	s.explainQueue(ctx, ts)
	rank := func(t core.Task) int {
		switch {
		case t.QueuePosition > 0:
			return t.QueuePosition
		case t.PendingReason != "":
			return 0 // being placed
		}
		return math.MaxInt
	}
	slices.SortStableFunc(ts, func(a, b core.Task) int { return cmp.Compare(rank(a), rank(b)) })
	items := make([]core.QueueItem, 0, len(ts))
	for _, t := range ts {
		items = append(items, core.QueueItem{ID: t.ID, Name: t.Name, User: t.User, GPUs: t.GPUCount(), Priority: t.Priority,
			CreatedAt: t.CreatedAt.UTC().Format(time.RFC3339Nano), Position: t.QueuePosition,
			PendingCode: t.PendingCode, PendingReason: t.PendingReason})
	}
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		Items []core.QueueItem `json:"items"`
	}{items})
}
