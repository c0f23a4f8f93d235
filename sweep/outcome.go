package sweep

import (
	"fmt"
	"math"
	"slices"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/stats"
	"github.com/rlsched/rlsched/sweep/tpe"
)

// Outcome is one proposal (a tpe sweep's) or cell (a grid or random
// sweep's) as its members' runs stand: its runs share their params but the
// seed. Its Trial is what TPE learns from it and what the best and the
// importances are read from.
type Outcome struct {
	// Key is the group's key (GroupKey); Runs its members' run ids, in
	// input order, and Scores the scores that count (the last value of the
	// sweep's metric, see Trial), once the proposal is not running.
	Key    string
	Runs   []string
	Scores []float64
	// Trial's Params are the point of Space the runs ran (Point); its
	// State Running while a run has not ended, Stopped when one was
	// stopped early (Step the furthest such run's last step), else
	// Finished. Its Value is the IQM of the scores that count: a finished
	// proposal's SUCCEEDED runs, a stopped one's every run with a score
	// (where they were stopped), the IQM of fewer than four being their
	// mean; NaN when none has one (TPE then skips it).
	Trial tpe.Trial
}

// Outcomes groups runs (each member's latest run, Series the sweep's
// metric, Reason the run's) into the sweep's proposals or cells, in the
// order of their first run. A run whose params are not a point of Space
// (a param missing or out of range) is an error naming it.
func (s *Spec) Outcomes(runs []Run) ([]Outcome, error) {
	var out []Outcome
	at := map[string]int{}
	counted := map[string][]float64{} // by key: the scores that count
	for _, r := range runs {
		key, err := GroupKey(r.Params)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", r.ID, err)
		}
		i, ok := at[key]
		if !ok {
			x, err := s.Point(r.Params)
			if err != nil {
				return nil, fmt.Errorf("run %s: %w", r.ID, err)
			}
			i, at[key] = len(out), len(out)
			out = append(out, Outcome{Key: key, Trial: tpe.Trial{Params: x, Value: math.NaN()}})
		}
		o := &out[i]
		o.Runs = append(o.Runs, r.ID)
		last, step, has := lastPoint(r.Series)
		switch {
		case !r.Status.Terminal():
			o.Trial.State = tpe.Running
		case r.Reason == core.ReasonEarlyStopped && o.Trial.State != tpe.Running:
			o.Trial.State = tpe.Stopped
			o.Trial.Step = max(o.Trial.Step, step)
		}
		if has && (r.Status == core.StatusSucceeded || r.Reason == core.ReasonEarlyStopped) {
			counted[key] = append(counted[key], last)
		}
	}
	for i := range out {
		if xs := counted[out[i].Key]; len(xs) > 0 && out[i].Trial.State != tpe.Running {
			out[i].Scores = xs
			out[i].Trial.Value = stats.IQM([][]float64{xs})
		}
	}
	return out, nil
}

// lastPoint is a series' last finite value and its step.
func lastPoint(series [][2]float64) (value float64, step int64, ok bool) {
	for i := len(series) - 1; i >= 0; i-- {
		if v := series[i][1]; !math.IsNaN(v) && !math.IsInf(v, 0) {
			return v, int64(series[i][0]), true
		}
	}
	return 0, 0, false
}

// Best is the index of the best finished outcome by the sweep's goal (the
// first of equals), or −1 when none has a value.
func (s *Spec) Best(outs []Outcome) int {
	best := -1
	for i, o := range outs {
		if o.Trial.State != tpe.Finished || math.IsNaN(o.Trial.Value) {
			continue
		}
		if best < 0 || s.Goal.Better(o.Trial.Value, outs[best].Trial.Value) {
			best = i
		}
	}
	return best
}

// Trials are outs' trials in order, for Suggest.
func Trials(outs []Outcome) []tpe.Trial {
	out := make([]tpe.Trial, len(outs))
	for i, o := range outs {
		out[i] = o.Trial
		out[i].Params = slices.Clone(o.Trial.Params)
	}
	return out
}
