package httpapi

import (
	"errors"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
)

const (
	// maxSparkIDs is how many runs one GET /api/sparklines reads: a page
	// of the Runs list and then some.
	maxSparkIDs = 100
	// sparkPoints is how many points a sparkline keeps of a series.
	sparkPoints = 48
)

// sparklines is GET /api/sparklines?ids=a,b&name=episode_reward: each
// run's series of the metric, thinned to at most sparkPoints points (the
// first, the last and evenly spaced ones between), for the Runs list. A
// run without the series, or unknown, is left out.
func (s *Server) sparklines(r *request) *apiError {
	q := r.ctx.QueryArgs()
	name := strings.TrimSpace(string(q.Peek("name")))
	if name == "" {
		name = "episode_reward"
	}
	if len(name) > 128 {
		return errBadRequest("name: a metric name is at most 128 bytes")
	}
	var ids []string
	for _, id := range strings.Split(string(q.Peek("ids")), ",") {
		if id == "" {
			continue
		}
		if !core.ValidTaskID(id) {
			return errBadRequest("ids must be run ids separated by commas")
		}
		ids = append(ids, id)
	}
	if len(ids) > maxSparkIDs {
		return errBadRequest("ids: at most %d runs", maxSparkIDs)
	}
	ctx, cancel := storeCtx()
	defer cancel()
	out := make(map[string][][2]float64, len(ids))
	for _, id := range ids {
		if _, ok := out[id]; ok {
			continue
		}
		series, err := s.st.Metrics(ctx, id, []string{name})
		if errors.Is(err, core.ErrNotFound) {
			continue
		}
		if err != nil {
			return storeError(err, "metrics of run "+id)
		}
		if pts := thin(finite(series[name]), sparkPoints); len(pts) > 0 {
			out[id] = pts
		}
	}
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		Name  string                  `json:"name"`
		Items map[string][][2]float64 `json:"items"`
	}{name, out})
}

// finite leaves out the points JSON cannot carry (the store keeps none;
// this answer must never fail on one).
func finite(pts [][2]float64) [][2]float64 {
	out := pts[:0:0]
	for _, p := range pts {
		if finiteOrNil(p[0]) != nil && finiteOrNil(p[1]) != nil {
			out = append(out, p)
		}
	}
	return out
}

// thin keeps at most n of pts (n ≥ 2): the first, the last and evenly
// spaced ones between.
func thin(pts [][2]float64, n int) [][2]float64 {
	if len(pts) <= n {
		return pts
	}
	out := make([][2]float64, n)
	for i := range n {
		out[i] = pts[i*(len(pts)-1)/(n-1)]
	}
	return out
}
