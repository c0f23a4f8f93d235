package sweepctl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/sweep"
	"github.com/rlsched/rlsched/sweep/earlystop"
	"github.com/rlsched/rlsched/sweep/goal"
	"github.com/rlsched/rlsched/sweep/tpe"
)

// DefaultInterval is the pause between two steps.
const DefaultInterval = 2 * time.Second

// listPage is how many sweeps one read of the list takes.
const listPage = 500

// Store is what the controller reads (store.Store satisfies it).
type Store interface {
	ListSweeps(ctx context.Context, f store.SweepFilter) ([]store.Sweep, string, error)
	SweepRuns(ctx context.Context, id string) ([]core.Task, error)
	SweepMetrics(ctx context.Context, id, name string) ([]store.MemberSeries, string, error)
	SweepDecisions(ctx context.Context, id string) ([]store.SweepDecision, error)
	KeepSweepDecisions(ctx context.Context, id string, ds []store.SweepDecision) error
}

// Stopper stops a member early (dispatch.Dispatcher.StopEarly): an error
// when this master does not hold the run, or it ended; the controller asks
// again at its next step while the run is active.
type Stopper interface {
	StopEarly(ctx context.Context, taskID, why string) error
}

// Grower adds proposals to a sweep as members from, from+1, ...
// (httpapi.Server.AddMembers builds their runs from template, a member's
// latest run, and stores them with store.AddSweepMembers): core.ErrConflict
// when another master added them first.
type Grower interface {
	AddMembers(ctx context.Context, sw store.Sweep, template core.Task, from int, members []sweep.Member) error
}

// Config is a Controller's parts.
type Config struct {
	Store   Store
	Stopper Stopper
	Grower  Grower
	// Interval is the pause between steps (DefaultInterval when 0).
	Interval time.Duration
	Log      zerolog.Logger
}

// Controller drives the sweeps that search or stop early. Run owns it: its
// fields are touched by Run's goroutine only (Step, when a test calls it
// instead, by the test's).
type Controller struct {
	cfg Config
	// specs caches each sweep's parsed spec (a spec never changes); a
	// spec that does not parse any more is kept as nil and skipped.
	specs map[string]*sweep.Spec
	// asked are the stops this controller asked for, so that a member in
	// its grace is not asked again each step (a restart asks once more:
	// a cancel request is idempotent).
	asked map[string]bool
}

// New makes a Controller.
func New(cfg Config) *Controller {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	return &Controller{cfg: cfg, specs: map[string]*sweep.Spec{}, asked: map[string]bool{}}
}

// Run steps every Interval until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := c.Step(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Log.Warn().Err(err).Msg("sweep controller: cannot step; trying again")
		}
	}
}

// Step looks at every sweep once and acts on those with work: members to
// judge (an earlyStop sweep with members queued or active) or proposals
// to make (a tpe sweep short of its budget).
func (c *Controller) Step(ctx context.Context) error {
	cursor := ""
	for {
		sws, next, err := c.cfg.Store.ListSweeps(ctx, store.SweepFilter{Limit: listPage, Cursor: cursor})
		if err != nil {
			return fmt.Errorf("cannot list sweeps: %w", err)
		}
		for _, sw := range sws {
			spec := c.spec(sw)
			if spec == nil || !hasWork(sw, spec) {
				continue
			}
			if err := c.stepSweep(ctx, sw, spec); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c.cfg.Log.Warn().Str("sweepId", sw.ID).Err(err).Msg("sweep controller: cannot act on a sweep")
			}
		}
		if next == "" {
			return nil
		}
		cursor = next
	}
}

func (c *Controller) spec(sw store.Sweep) *sweep.Spec {
	spec, ok := c.specs[sw.ID]
	if !ok {
		var err error
		if spec, err = sweep.Parse(sw.Spec); err != nil {
			c.cfg.Log.Warn().Str("sweepId", sw.ID).Err(err).Msg("sweep controller: the stored spec does not parse; leaving the sweep alone")
			spec = nil
		} else if spec.EarlyStop == nil && spec.Method != sweep.TPE {
			spec = nil // nothing to do, ever
		}
		c.specs[sw.ID] = spec
	}
	return spec
}

// hasWork reports whether sw may need the controller now.
func hasWork(sw store.Sweep, spec *sweep.Spec) bool {
	open := 0
	for st, n := range sw.Counts {
		if !st.Terminal() {
			open += n
		}
	}
	return open > 0 || spec.Method == sweep.TPE && sw.Members < spec.Budget
}

// stepSweep judges sw's members and makes its next proposals.
func (c *Controller) stepSweep(ctx context.Context, sw store.Sweep, spec *sweep.Spec) error {
	runs, err := c.cfg.Store.SweepRuns(ctx, sw.ID)
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		return nil
	}
	series := map[string]map[string][][2]float64{} // by metric, then task id
	seriesOf := func(name string) (map[string][][2]float64, error) {
		if s, ok := series[name]; ok {
			return s, nil
		}
		ms, _, err := c.cfg.Store.SweepMetrics(ctx, sw.ID, name)
		if err != nil {
			return nil, err
		}
		s := make(map[string][][2]float64, len(ms))
		for _, m := range ms {
			s[m.TaskID] = m.Points
		}
		series[name] = s
		return s, nil
	}
	if spec.EarlyStop != nil && anyActive(runs) {
		s, err := seriesOf(spec.EarlyStop.Metric)
		if err != nil {
			return err
		}
		if err := c.stop(ctx, sw.ID, spec.EarlyStop, runs, s); err != nil {
			return err
		}
	}
	if spec.Method != sweep.TPE || sw.Members >= spec.Budget {
		return nil
	}
	s, err := seriesOf(spec.Metric)
	if err != nil {
		return err
	}
	return c.propose(ctx, sw, spec, runs, s)
}

func anyActive(runs []core.Task) bool {
	for _, t := range runs {
		if t.Status.Active() {
			return true
		}
	}
	return false
}

// stop keeps the rule's new decisions of sweep id, then asks for the stop
// of every active member the rule stops. The decisions are kept first, so
// that no stop is asked that the record does not show.
func (c *Controller) stop(ctx context.Context, id string, es *sweep.EarlyStop, runs []core.Task, series map[string][][2]float64) error {
	members := make([]Member, len(runs))
	for i, t := range runs {
		members[i] = Member{TaskID: t.ID, StartedAt: t.StartedAt, Status: t.Status, Series: series[t.ID]}
	}
	rows, err := c.cfg.Store.SweepDecisions(ctx, id)
	if err != nil {
		return err
	}
	kept := make([]earlystop.Decision, len(rows))
	for i, r := range rows {
		kept[i] = DecisionOf(r)
	}
	j, err := Judge(es.Config, members, kept)
	if err != nil { // Parse validated the config
		c.cfg.Log.Error().Err(err).Msg("BUG: sweep controller: a parsed earlyStop does not make a stopper")
		return nil
	}
	if len(j.New) > 0 {
		now := time.Now()
		ds := make([]store.SweepDecision, len(j.New))
		for i, d := range j.New {
			// A nanosecond apart: SweepDecisions gives them in this order.
			ds[i] = store.SweepDecision{TaskID: d.Member, Rung: d.Rung, Step: d.RungStep, Value: d.Value,
				Cut: d.Cut, Peers: d.Peers, Stop: d.Stop, DecidedAt: now.Add(time.Duration(i))}
		}
		if err := c.cfg.Store.KeepSweepDecisions(ctx, id, ds); err != nil {
			return err
		}
	}
	for _, t := range runs {
		d, ok := j.Stops[t.ID]
		if !ok || !t.Status.Active() || c.asked[t.ID] {
			continue
		}
		err := c.cfg.Stopper.StopEarly(ctx, t.ID, StopMessage(es.Metric, es.Goal, d))
		switch {
		case err == nil:
			c.asked[t.ID] = true
			c.cfg.Log.Info().Str("task", t.ID).Str("sweepId", t.SweepID).Msg("sweep member stopped early: " + StopMessage(es.Metric, es.Goal, d))
		case errors.Is(err, core.ErrConflict): // ended meanwhile
		default:
			c.cfg.Log.Debug().Str("task", t.ID).Err(err).Msg("sweep controller: not stopping a member here")
		}
	}
	return nil
}

// DecisionOf is a kept decision as sweep/earlystop gives it.
func DecisionOf(r store.SweepDecision) earlystop.Decision {
	return earlystop.Decision{Member: r.TaskID, Step: r.Step, Stop: r.Stop, Rung: r.Rung, RungStep: r.Step,
		Value: r.Value, Cut: r.Cut, Peers: r.Peers}
}

// StopMessage is a stopped member's error: the rung (counted from 1), its
// step, the value judged and the cut, such as "stopped at rung 2 (step
// 300): episode_reward 12.1 below the cut 15.3 of 7 members".
func StopMessage(metric string, g goal.Goal, d earlystop.Decision) string {
	side := "below"
	if g == goal.Minimize {
		side = "above"
	}
	if d.Rung < 0 {
		return fmt.Sprintf("stopped at step %d: best %s %g %s the median %g of %d other members' running averages",
			d.Step, metric, d.Value, side, d.Cut, d.Peers)
	}
	return fmt.Sprintf("stopped at rung %d (step %d): %s %g %s the cut %g of %d members",
		d.Rung+1, d.RungStep, metric, d.Value, side, d.Cut, d.Peers)
}

// propose adds the proposals sw's free share allows.
func (c *Controller) propose(ctx context.Context, sw store.Sweep, spec *sweep.Spec, runs []core.Task, series map[string][][2]float64) error {
	in := make([]sweep.Run, len(runs))
	for i, t := range runs {
		in[i] = sweep.Run{ID: t.ID, Params: t.Params, Status: t.Status, Reason: t.Reason, Series: series[t.ID]}
	}
	outs, err := spec.Outcomes(in)
	if err != nil {
		return err
	}
	trials := sweep.Trials(outs)
	running := 0
	for _, tr := range trials {
		if tr.State == tpe.Running {
			running++
		}
	}
	made := sw.Members / spec.SeedsPerProposal()
	n := min(spec.InFlight()-running, spec.Proposals()-made)
	if n <= 0 {
		return nil
	}
	var members []sweep.Member
	for i := range n {
		ms, err := spec.Suggest(trials, made+i)
		if err != nil {
			return err
		}
		x, err := spec.Point(ms[0].Cell)
		if err != nil {
			return err
		}
		trials = append(trials, tpe.Trial{Params: x, State: tpe.Running})
		members = append(members, ms...)
	}
	err = c.cfg.Grower.AddMembers(ctx, sw, runs[0], sw.Members, members)
	if errors.Is(err, core.ErrConflict) {
		return nil // another master proposed first; the next step reads its members
	}
	if err == nil {
		c.cfg.Log.Info().Str("sweepId", sw.ID).Int("from", sw.Members).Int("members", len(members)).Msg("sweep proposals added")
	}
	return err
}
