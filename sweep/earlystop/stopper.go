package earlystop

import (
	"fmt"
	"slices"
	"sort"
)

// Decision is the judgement of one member at one point.
type Decision struct {
	Member string
	// Step is the step of the report judged.
	Step int64
	// Stop is true when the member should stop; false, it continues.
	Stop bool
	// Rung is the index of ASHA's rung judged at, −1 under Median.
	Rung int
	// RungStep is the rung's step under ASHA, Step under Median.
	RungStep int64
	// Value is what was judged: under ASHA the member's value at the rung,
	// under Median its best value so far.
	Value float64
	// Cut is the bar: under ASHA the worst value still in the top 1/η at the
	// rung, under Median the median of the others' running averages.
	Cut float64
	// Peers is how many values the cut was taken over: under ASHA the values
	// at the rung, the member's included, under Median the other members'.
	Peers int
}

// Reason says why, for the sweep page and the run's cancel reason.
func (d Decision) Reason() string {
	verb := "continues"
	if d.Stop {
		verb = "stopped"
	}
	if d.Rung < 0 {
		return fmt.Sprintf("%s at step %d: best %g vs median %g of %d other members' running averages",
			verb, d.Step, d.Value, d.Cut, d.Peers)
	}
	return fmt.Sprintf("%s at rung %d (step %d): %g vs cut %g of %d members at the rung",
		verb, d.Rung, d.RungStep, d.Value, d.Cut, d.Peers)
}

// member is what a Stopper keeps of one member.
type member struct {
	reported bool
	last     int64 // the step of its last report
	best     float64
	// steps and sums are, under Median, its reports' steps in order and the
	// running sums of their values: its running average at any step.
	steps []int64
	sums  []float64
	// nextRung is the first ASHA rung it has not been judged at.
	nextRung int
	stop     *Decision
}

// Stopper judges the members of one sweep. Make one with New.
type Stopper struct {
	cfg       Config
	rungs     []int64
	atRung    [][]float64 // ASHA: the values judged at each rung, sorted best first
	members   map[string]*member
	decisions []Decision
	// kept are the ASHA decisions made before (Keep), by member and rung.
	kept map[keptKey]Decision
}

type keptKey struct {
	member string
	rung   int
}

// Keep makes a decision made before (an ASHA rung decision, d.Rung ≥ 0)
// the member's decision at that rung whatever the reports give: a member
// that continued at a rung is never stopped there later, when a report
// that came later lowers the rung's bar. The member's value at the rung
// still counts towards the others' cuts. A Median decision is not kept.
func (s *Stopper) Keep(d Decision) {
	if s.cfg.Method != ASHA || d.Rung < 0 || d.Rung >= len(s.rungs) {
		return
	}
	if s.kept == nil {
		s.kept = map[keptKey]Decision{}
	}
	s.kept[keptKey{d.Member, d.Rung}] = d
}

// New makes a Stopper, or returns Validate's error.
func New(cfg Config) (*Stopper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Stopper{cfg: cfg, members: map[string]*member{}}
	if cfg.Method == ASHA {
		s.rungs = cfg.rungSteps()
		s.atRung = make([][]float64, len(s.rungs))
	}
	return s, nil
}

// Report feeds one report and returns its decision; judged is false when
// the report was not judged (ASHA: no new rung reached; Median: before
// MinSteps or with too few peers), and then the member continues. A NaN
// value, or a step not after the member's last, is ignored. Once stopped, a
// member's every later report returns its stop again.
func (s *Stopper) Report(name string, step int64, value float64) (d Decision, judged bool) {
	m := s.members[name]
	if m == nil {
		m = &member{}
		s.members[name] = m
	}
	if m.stop != nil {
		return *m.stop, true
	}
	if !judgeable(value) || m.reported && step <= m.last {
		return Decision{}, false
	}
	if !m.reported || s.cfg.Goal.Better(value, m.best) {
		m.best = value
	}
	m.reported, m.last = true, step

	if s.cfg.Method == ASHA {
		d, judged = s.judgeRung(name, m, step, value)
	} else {
		sum := value
		if n := len(m.sums); n > 0 {
			sum += m.sums[n-1]
		}
		m.steps, m.sums = append(m.steps, step), append(m.sums, sum)
		d, judged = s.judgeMedian(name, m, step)
	}
	if !judged {
		return Decision{}, false
	}
	if d.Stop {
		m.stop = &d
	}
	if d.Stop || s.cfg.Method == ASHA {
		s.decisions = append(s.decisions, d)
	}
	return d, true
}

// judgeRung judges m at the highest rung its step reached that it has not
// been judged at (as Ray Tune does: a member that skips a rung between two
// reports is judged at the higher one only).
func (s *Stopper) judgeRung(name string, m *member, step int64, value float64) (Decision, bool) {
	k := sort.Search(len(s.rungs), func(i int) bool { return s.rungs[i] > step }) - 1
	if k < m.nextRung {
		return Decision{}, false
	}
	m.nextRung = k + 1
	g := s.cfg.Goal
	vs := s.atRung[k]
	// Insert after equal values: a tie with the cut continues.
	i := sort.Search(len(vs), func(i int) bool { return g.Better(value, vs[i]) })
	vs = slices.Insert(vs, i, value)
	s.atRung[k] = vs
	eta := s.cfg.eta()
	keep := (len(vs) + eta - 1) / eta // ⌈n/η⌉: the first to arrive continues
	cut := vs[keep-1]
	if d, ok := s.kept[keptKey{name, k}]; ok {
		d.Member, d.Step = name, step
		return d, true
	}
	return Decision{
		Member: name, Step: step, Stop: g.Better(cut, value),
		Rung: k, RungStep: s.rungs[k], Value: value, Cut: cut, Peers: len(vs),
	}, true
}

// judgeMedian judges m at step by the median stopping rule, over the other
// members that have reported at or past step.
func (s *Stopper) judgeMedian(name string, m *member, step int64) (Decision, bool) {
	if step < s.cfg.MinSteps {
		return Decision{}, false
	}
	var avgs []float64
	for other, o := range s.members {
		if other == name || !o.reported || o.last < step {
			continue
		}
		// n is 0 when o's first report came after step: it has no average there.
		if n := sort.Search(len(o.steps), func(i int) bool { return o.steps[i] > step }); n > 0 {
			avgs = append(avgs, o.sums[n-1]/float64(n))
		}
	}
	if len(avgs) < medianMinPeers {
		return Decision{}, false
	}
	slices.Sort(avgs)
	n := len(avgs)
	med := (avgs[(n-1)/2] + avgs[n/2]) / 2
	return Decision{
		Member: name, Step: step, Stop: s.cfg.Goal.Better(med, m.best),
		Rung: -1, RungStep: step, Value: m.best, Cut: med, Peers: n,
	}, true
}

// Decisions returns the decisions kept, in the order made: every ASHA rung
// decision and every stop.
func (s *Stopper) Decisions() []Decision { return slices.Clone(s.decisions) }

// Stopped returns a member's stop, if it was stopped.
func (s *Stopper) Stopped(name string) (Decision, bool) {
	if m := s.members[name]; m != nil && m.stop != nil {
		return *m.stop, true
	}
	return Decision{}, false
}

// Reported reports whether a member has reported a value, so the sweep can
// say which members were never judged for lacking the metric.
func (s *Stopper) Reported(name string) bool {
	m := s.members[name]
	return m != nil && m.reported
}
