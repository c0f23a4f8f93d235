package httpapi

import (
	"encoding/json"
	"math"
	"math/rand/v2"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/stats"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/sweep"
	"github.com/rlsched/rlsched/sweep/importance"
	"github.com/rlsched/rlsched/sweep/tpe"
)

// importanceStream is the PCG stream of a sweep's importances: the same
// members, the same answer.
const importanceStream = 0x696d70 // "imp"

// sweepBest is GET /api/sweeps/{id}'s best: the best finished proposal or
// cell by the sweep's goal, its params without the seed, the IQM of its
// seeds' scores with a 95% bootstrap interval, and its runs.
type sweepBest struct {
	Params json.RawMessage `json:"params"`
	Value  float64         `json:"value"`
	CI     [2]float64      `json:"ci"`
	Runs   []string        `json:"runs"`
}

// sweepStop is a member stopped by the sweep's early stopping and why.
type sweepStop struct {
	Run   string `json:"run"`
	Error string `json:"error"`
}

// sweepSearch is what GET /api/sweeps/{id} adds for search and early
// stopping (API.md "Sweep search and early stopping").
type sweepSearch struct {
	Method     sweep.Method            `json:"method"`
	Metric     string                  `json:"metric"`
	Goal       string                  `json:"goal"`
	Budget     int                     `json:"budget,omitempty"`
	Best       *sweepBest              `json:"best"`
	Importance []importance.Importance `json:"importance"`
	Stops      []sweepStop             `json:"stops"`
	// Unreported are the members that started without reporting the
	// early-stopping metric: never judged, so never stopped for lacking it.
	Unreported []string `json:"unreported"`
	// NoObjective are the members that ran and ended without a point of
	// the sweep's metric: their proposal has no value (TPE learns nothing
	// from it, it is never best), so a metric no member reports shows as
	// every ended member here rather than as a search that finds nothing.
	NoObjective []string `json:"noObjective"`
	// Decisions are the early-stopping rule's kept rung decisions
	// (sweepctl), by rung, then in the order made; absent without
	// earlyStop.
	Decisions []sweepDecision `json:"decisions,omitzero"`
}

// sweepDecision is a member's run judged at an ASHA rung (counted from 1,
// as the stop's message counts it): it continued or stopped, by its value
// against the cut over peers values at the rung.
type sweepDecision struct {
	Run   string  `json:"run"`
	Rung  int     `json:"rung"`
	Step  int64   `json:"step"`
	Value float64 `json:"value"`
	Cut   float64 `json:"cut"`
	Peers int     `json:"peers"`
	Stop  bool    `json:"stop"`
}

func decisionsOf(ds []store.SweepDecision) []sweepDecision {
	out := make([]sweepDecision, len(ds))
	for i, d := range ds {
		out[i] = sweepDecision{Run: d.TaskID, Rung: d.Rung + 1, Step: d.Step, Value: d.Value, Cut: d.Cut, Peers: d.Peers, Stop: d.Stop}
	}
	return out
}

// searchOf reads spec's search results from the members' latest runs and
// the sweep's metric (series, by task id) and early-stopping metric
// (esSeries; nil without earlyStop).
func searchOf(spec *sweep.Spec, runs []core.Task, series, esSeries map[string][][2]float64) (sweepSearch, error) {
	out := sweepSearch{Method: spec.Method, Metric: spec.Metric, Goal: string(spec.Goal), Budget: spec.Budget,
		Importance: []importance.Importance{}, Stops: []sweepStop{}, Unreported: []string{}, NoObjective: []string{}}
	in := make([]sweep.Run, len(runs))
	for i, t := range runs {
		in[i] = sweep.Run{ID: t.ID, Params: t.Params, Status: t.Status, Reason: t.Reason, Series: series[t.ID]}
		if t.Reason == core.ReasonEarlyStopped {
			out.Stops = append(out.Stops, sweepStop{t.ID, t.Error})
		}
		if esSeries != nil && t.StartedAt != nil && len(esSeries[t.ID]) == 0 {
			out.Unreported = append(out.Unreported, t.ID)
		}
		if t.Status.Terminal() && t.StartedAt != nil && len(series[t.ID]) == 0 {
			out.NoObjective = append(out.NoObjective, t.ID)
		}
	}
	outs, err := spec.Outcomes(in)
	if err != nil {
		return out, err
	}
	if b := spec.Best(outs); b >= 0 {
		o := outs[b]
		best := &sweepBest{Params: json.RawMessage(o.Key), Value: o.Trial.Value, CI: [2]float64{o.Trial.Value, o.Trial.Value}, Runs: o.Runs}
		res, err := stats.Compare(stats.Request{Groups: []stats.Group{{Scores: [][]float64{o.Scores}}},
			Stats: []stats.Stat{stats.StatIQM}, Options: stats.DefaultOptions()})
		if err == nil {
			iv := res.Groups[0].Stats[stats.StatIQM]
			best.CI = [2]float64{iv.Lo, iv.Hi}
		}
		out.Best = best
	}
	var x [][]float64
	var y []float64
	for _, o := range outs {
		if o.Trial.State == tpe.Finished && !math.IsNaN(o.Trial.Value) {
			x, y = append(x, o.Trial.Params), append(y, o.Trial.Value)
		}
	}
	if len(y) >= importance.MinTrials {
		rng := rand.New(rand.NewPCG(spec.RandomSeed, importanceStream))
		imp, err := importance.Permutation(spec.Space(), x, y, rng, importance.Options{})
		if err == nil {
			out.Importance = imp
		}
	}
	return out, nil
}
