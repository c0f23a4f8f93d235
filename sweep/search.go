package sweep

import (
	"github.com/rlsched/rlsched/internal/clip"

	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/rlsched/rlsched/sweep/earlystop"
	"github.com/rlsched/rlsched/sweep/goal"
)

// Method is how a sweep chooses its members (API.md "Sweep search and
// early stopping").
type Method string

const (
	// Grid is every cell of the grid (the default without random params).
	Grid Method = "grid"
	// Random is the grid's cells × the random samples (the default with
	// random params).
	Random Method = "random"
	// TPE proposes Budget members, the grid's axes searched as choices:
	// Initial at submission, then Suggest as members end (the master's
	// sweep controller, package sweepctl). Members expands one as a random
	// search of the same space.
	TPE Method = "tpe"
)

// DefaultMetric is the objective a spec without metric optimises, the
// metric GET /api/sweeps/{id}/metrics shows by default.
const DefaultMetric = "episode_reward"

const maxMetricBytes = 128 // as /api/tasks/{id}/metrics takes

// EarlyStop is a spec's earlyStop: the metric it watches and how it stops.
type EarlyStop struct {
	Metric string
	earlystop.Config
}

type rawEarlyStop struct {
	Method          json.RawMessage `json:"method"`
	Metric          json.RawMessage `json:"metric"`
	Goal            json.RawMessage `json:"goal"`
	MinSteps        json.RawMessage `json:"minSteps"`
	ReductionFactor json.RawMessage `json:"reductionFactor"`
	Rungs           json.RawMessage `json:"rungs"`
}

// parseSearch reads metric, goal, budget and earlyStop and checks the
// method against the grid, random and seeds, read before.
func (s *Spec) parseSearch(r *rawSpec) error {
	var err error
	if s.Metric, err = metricName(r.Metric, "metric", DefaultMetric); err != nil {
		return err
	}
	if s.Goal, err = parseGoal(r.Goal, "goal", goal.Maximize); err != nil {
		return err
	}
	if err := s.parseMethod(r.Samples, r.Budget); err != nil {
		return err
	}
	return s.parseEarlyStop(r.EarlyStop)
}

// parseMethodName reads method before the grid and random, whose checks
// depend on it; parseMethod checks it against them.
func (s *Spec) parseMethodName(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var m string
	if json.Unmarshal(raw, &m) != nil {
		return fieldErr("method", "must be a string: grid, random or tpe")
	}
	switch s.Method = Method(m); s.Method {
	case Grid, Random, TPE:
		return nil
	}
	return fieldErr("method", "unknown method %q; use grid, random or tpe", clip.String(m, 32))
}

func (s *Spec) parseMethod(samples, budget json.RawMessage) error {
	if s.Method == "" {
		s.Method = Grid
		if len(s.random) > 0 {
			s.Method = Random
		}
	}
	switch s.Method {
	case Grid:
		if len(s.random) > 0 {
			return fieldErr("method", "grid takes no random params; use method random (grid cells × random samples) or drop random")
		}
	case Random:
		if len(s.random) == 0 {
			return fieldErr("random", "method random needs random params, e.g. {\"lr\": {\"dist\": \"loguniform\", \"min\": 1e-5, \"max\": 1e-2}}")
		}
	case TPE:
		return s.parseBudget(samples, budget)
	}
	if !isNull(budget) {
		return fieldErr("budget", "applies only to method tpe; a %s sweep has cells × seeds members", s.Method)
	}
	return nil
}

// parseBudget checks a tpe sweep's space and budget, and sets samples to
// its proposals: budget ÷ seeds.
func (s *Spec) parseBudget(samples, budget json.RawMessage) error {
	if len(s.random) == 0 {
		return fieldErr("random", "tpe searches random params; give at least one, or use method grid for a grid alone")
	}
	if !isNull(samples) {
		return fieldErr("samples", "tpe proposes budget members; drop samples")
	}
	if err := s.Space().Validate(); err != nil {
		return fieldErr("random", "%v", err)
	}
	n, err := memberCount(budget, "budget", "tpe needs the members to run in all")
	if err != nil {
		return err
	}
	seeds := max(len(s.Seeds), 1)
	if n%seeds != 0 {
		return fieldErr("budget", "each proposal runs %d seeds; make budget a multiple of %d", seeds, seeds)
	}
	s.Budget, s.samples = n, n/seeds
	return nil
}

func (s *Spec) parseEarlyStop(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var r rawEarlyStop
	if bytes.TrimSpace(raw)[0] != '{' || json.Unmarshal(raw, &r) != nil {
		return fieldErr("earlyStop", `must be an object {"method": "asha" or "median", "minSteps", ...}`)
	}
	e := &EarlyStop{}
	var err error
	if isNull(r.Method) {
		return fieldErr("earlyStop.method", "give asha or median")
	}
	var m string
	if json.Unmarshal(r.Method, &m) != nil {
		return fieldErr("earlyStop.method", "must be a string: asha or median")
	}
	e.Method = earlystop.Method(m)
	if e.Metric, err = metricName(r.Metric, "earlyStop.metric", s.Metric); err != nil {
		return err
	}
	if e.Goal, err = parseGoal(r.Goal, "earlyStop.goal", s.Goal); err != nil {
		return err
	}
	if !isNull(r.MinSteps) {
		if e.MinSteps, err = integer(r.MinSteps, "earlyStop.minSteps"); err != nil {
			return err
		}
	}
	if !isNull(r.ReductionFactor) {
		n, err := integer(r.ReductionFactor, "earlyStop.reductionFactor")
		if err != nil {
			return err
		}
		if n == 0 { // 0 would read as "the default"
			return fieldErr("earlyStop.reductionFactor", "must be 2..100, or left out for %d", earlystop.DefaultReductionFactor)
		}
		e.ReductionFactor = int(n)
	}
	if !isNull(r.Rungs) {
		vs, err := arrayOf(r.Rungs)
		if err != nil {
			return fieldErr("earlyStop.rungs", "must be an array of steps, e.g. [1000, 3000, 9000]")
		}
		if len(vs) > earlystop.MaxRungs {
			return fieldErr("earlyStop.rungs", "give 1..%d steps, increasing", earlystop.MaxRungs)
		}
		e.Rungs = make([]int64, len(vs))
		for i, v := range vs {
			if e.Rungs[i], err = integer(v, fmt.Sprintf("earlyStop.rungs[%d]", i)); err != nil {
				return err
			}
		}
	}
	if err := e.Validate(); err != nil {
		var ce *earlystop.ConfigError
		if errors.As(err, &ce) {
			return fieldErr("earlyStop."+ce.Field, "%s", ce.Message)
		}
		return fieldErr("earlyStop", "%v", err)
	}
	s.EarlyStop = e
	return nil
}

// metricName reads a metric name, def when absent.
func metricName(raw json.RawMessage, field, def string) (string, error) {
	if isNull(raw) {
		return def, nil
	}
	var v string
	if json.Unmarshal(raw, &v) != nil {
		return "", fieldErr(field, "must be a metric name (a string)")
	}
	if v == "" || len(v) > maxMetricBytes || strings.TrimSpace(v) != v || strings.IndexByte(v, 0) >= 0 {
		return "", fieldErr(field, "must be a metric name of 1..%d bytes, without surrounding spaces or NUL", maxMetricBytes)
	}
	return v, nil
}

func parseGoal(raw json.RawMessage, field string, def goal.Goal) (goal.Goal, error) {
	if isNull(raw) {
		return def, nil
	}
	var v string
	if json.Unmarshal(raw, &v) != nil || v == "" {
		return "", fieldErr(field, "must be %q or %q", goal.Maximize, goal.Minimize)
	}
	g, err := goal.Parse(v)
	if err != nil {
		return "", fieldErr(field, "%v", err)
	}
	return g, nil
}
