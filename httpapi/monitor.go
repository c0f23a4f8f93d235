package httpapi

import (
	"context"
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
)

const pingTimeout = 3 * time.Second

// workers is GET /api/workers.
func (s *Server) workers(r *request) *apiError {
	ws := s.ctl.Workers()
	items := make([]core.WorkerInfo, 0, len(ws))
	for _, w := range ws {
		if r.user.Role != core.RoleAdmin {
			w = w.ForUser() // who runs a foreign process is for admins
		}
		items = append(items, w.View())
	}
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		Items []core.WorkerInfo `json:"items"`
	}{items})
}

// WorkerAdmin is implemented by a Control that lets admins drain and
// forget workers (dispatch.Dispatcher; with several masters, masterd's
// cluster control, which reaches the master holding the worker).
type WorkerAdmin interface {
	// DrainWorker sets whether worker id takes new runs and returns its
	// view; core.ErrNotFound for an unknown worker.
	DrainWorker(id string, drain bool) (core.WorkerInfo, error)
	// ForgetWorker drops a DOWN worker; core.ErrNotFound for an unknown
	// one, core.ErrConflict for one that is not DOWN.
	ForgetWorker(id string) error
}

// drainWorker is POST (drain) and DELETE (resume) /api/workers/{workerId}/drain.
func (s *Server) drainWorker(r *request) *apiError {
	wa, e := s.workerAdmin(r)
	if e != nil {
		return e
	}
	drain := string(r.ctx.Method()) == fasthttp.MethodPost
	w, err := wa.DrainWorker(r.param, drain)
	if err != nil {
		return storeError(err, "worker "+r.param)
	}
	s.log.Info().Str("traceId", r.trace).Int64("by", r.user.ID).Str("worker", r.param).Bool("drain", drain).Msg("worker drain changed")
	return s.writeJSON(r, fasthttp.StatusOK, w.View())
}

// forgetWorker is DELETE /api/workers/{workerId}: a DOWN worker leaves the list.
func (s *Server) forgetWorker(r *request) *apiError {
	wa, e := s.workerAdmin(r)
	if e != nil {
		return e
	}
	if err := wa.ForgetWorker(r.param); err != nil {
		if errors.Is(err, core.ErrConflict) {
			return &apiError{fasthttp.StatusConflict, codeConflict,
				"worker " + r.param + " is not DOWN: only a DOWN worker can be forgotten (drain it, stop it, then forget it)"}
		}
		return storeError(err, "worker "+r.param)
	}
	s.log.Info().Str("traceId", r.trace).Int64("by", r.user.ID).Str("worker", r.param).Msg("worker forgotten")
	r.ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}

func (s *Server) workerAdmin(r *request) (WorkerAdmin, *apiError) {
	if !core.ValidWorkerID(r.param) {
		return nil, errBadRequest("malformed worker id")
	}
	wa, ok := s.ctl.(WorkerAdmin)
	if !ok {
		return nil, &apiError{fasthttp.StatusServiceUnavailable, codeUnavailable, "this master cannot drain or forget workers"}
	}
	return wa, nil
}

// LogStatser is implemented by a Control that can report its log pipe's
// health (shown under "logpipe" in /api/monitor/health).
type LogStatser interface {
	LogStats() map[string]any
}

type healthJSON struct {
	Status  string                   `json:"status"`
	Master  string                   `json:"master"`
	Version string                   `json:"version"`
	Workers map[core.WorkerState]int `json:"workers"`
	Queue   *queueJSON               `json:"queue,omitempty"`
	Logpipe map[string]any           `json:"logpipe"`
	// Artifacts is the outputs receiver's health (Config.OutputStats).
	Artifacts map[string]any `json:"artifacts,omitempty"`
	Store     string         `json:"store"`
	Leases    string         `json:"leases"`
	Error     string         `json:"error,omitempty"`
}

type queueJSON struct {
	Queued int `json:"queued"`
}

// health is GET /api/monitor/health: 200 UP, or 503 DOWN when the store does
// not answer.
func (s *Server) health(r *request) *apiError {
	h := healthJSON{
		Status:  "UP",
		Master:  s.cfg.MasterID,
		Version: core.Version,
		Workers: map[core.WorkerState]int{core.WorkerIdle: 0, core.WorkerRunning: 0, core.WorkerPending: 0, core.WorkerDown: 0, core.WorkerDraining: 0},
		Logpipe: map[string]any{},
		Store:   s.st.Kind(),
		Leases:  s.cfg.LeasesKind,
	}
	if h.Master == "" {
		h.Master = s.ctl.MasterID()
	}
	for _, w := range s.ctl.Workers() {
		h.Workers[w.State]++
	}
	if ls, ok := s.ctl.(LogStatser); ok {
		h.Logpipe = ls.LogStats()
	}
	if s.cfg.OutputStats != nil {
		h.Artifacts = s.cfg.OutputStats()
	}
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	err := s.st.Ping(ctx)
	var counts map[core.Status]int
	if err == nil {
		counts, err = s.st.CountByStatus(ctx)
	}
	if err != nil {
		s.log.Warn().Err(err).Str("traceId", r.trace).Msg("health: store unreachable")
		h.Status, h.Error = "DOWN", "the store is unreachable"
		return s.writeJSON(r, fasthttp.StatusServiceUnavailable, h)
	}
	h.Queue = &queueJSON{Queued: counts[core.StatusQueued]}
	return s.writeJSON(r, fasthttp.StatusOK, h)
}
