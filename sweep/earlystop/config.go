package earlystop

import (
	"fmt"
	"math"

	"github.com/rlsched/rlsched/sweep/goal"
)

// Method is how a Stopper judges members.
type Method string

const (
	// ASHA judges a member at each rung it reaches: it continues iff its
	// value is in the top 1/ReductionFactor of the values that reached the
	// rung so far, itself included.
	ASHA Method = "asha"
	// Median stops a member, from MinSteps on, when its best value so far is
	// worse than the median of the other members' running averages at the
	// same step.
	Median Method = "median"
)

const (
	// DefaultReductionFactor is ASHA's η when the config gives none.
	DefaultReductionFactor = 3
	// MaxRungs caps the rungs a config may list.
	MaxRungs = 64
	// medianMinPeers is how many other members must have reached a step
	// before the median rule judges a member there: a median of one or two
	// curves is noise (Ray Tune's min_samples_required).
	medianMinPeers = 3
	// maxStep bounds steps so that each is exact in a float64 and in JSON.
	maxStep = 1<<53 - 1
)

// Config is a sweep's earlyStop field (API.md), its goal already parsed.
type Config struct {
	Method Method
	Goal   goal.Goal
	// MinSteps is ASHA's first rung when Rungs is empty (the rungs are then
	// MinSteps·η^k), and the median rule's grace: no member is judged
	// before it.
	MinSteps int64
	// ReductionFactor is ASHA's η: the top 1/η of a rung continue (default
	// DefaultReductionFactor).
	ReductionFactor int
	// Rungs are ASHA's rungs as steps, increasing, instead of MinSteps·η^k.
	Rungs []int64
}

// ConfigError is a bad Config: Field names the field as a spec writes it
// inside earlyStop ("rungs[2]", "reductionFactor").
type ConfigError struct {
	Field   string
	Message string
}

func (e *ConfigError) Error() string { return e.Field + ": " + e.Message }

func configErr(field, format string, args ...any) *ConfigError {
	return &ConfigError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Validate refuses a Config that New would refuse, as a *ConfigError.
func (c Config) Validate() error {
	if c.Goal != goal.Maximize && c.Goal != goal.Minimize {
		return configErr("goal", "must be %q or %q", goal.Maximize, goal.Minimize)
	}
	if c.MinSteps < 0 || c.MinSteps > maxStep {
		return configErr("minSteps", "must be 0..%d", int64(maxStep))
	}
	switch c.Method {
	case Median:
		if c.ReductionFactor != 0 {
			return configErr("reductionFactor", "applies only to asha; drop it")
		}
		if c.Rungs != nil {
			return configErr("rungs", "apply only to asha; drop them")
		}
		return nil
	case ASHA:
	default:
		return configErr("method", "must be %q or %q", ASHA, Median)
	}
	if c.ReductionFactor != 0 && (c.ReductionFactor < 2 || c.ReductionFactor > 100) {
		return configErr("reductionFactor", "must be 2..100 (the top 1/η of a rung continue)")
	}
	if c.Rungs == nil {
		if c.MinSteps < 1 {
			return configErr("minSteps", "asha needs minSteps ≥ 1 (the first rung) or rungs")
		}
		return nil
	}
	if c.MinSteps != 0 {
		return configErr("rungs", "give rungs or minSteps, not both")
	}
	if len(c.Rungs) == 0 || len(c.Rungs) > MaxRungs {
		return configErr("rungs", "give 1..%d steps, increasing", MaxRungs)
	}
	for i, r := range c.Rungs {
		field := fmt.Sprintf("rungs[%d]", i)
		switch {
		case r < 1 || r > maxStep:
			return configErr(field, "must be a step 1..%d", int64(maxStep))
		case i > 0 && r <= c.Rungs[i-1]:
			return configErr(field, "must be greater than rungs[%d] (%d): rungs increase", i-1, c.Rungs[i-1])
		}
	}
	return nil
}

// eta is the reduction factor in force.
func (c Config) eta() int {
	if c.ReductionFactor == 0 {
		return DefaultReductionFactor
	}
	return c.ReductionFactor
}

// rungSteps lists ASHA's rungs: Rungs, or MinSteps·η^k up to maxStep.
func (c Config) rungSteps() []int64 {
	if c.Rungs != nil {
		return append([]int64(nil), c.Rungs...)
	}
	var out []int64
	eta := int64(c.eta())
	for r := c.MinSteps; ; r *= eta {
		out = append(out, r)
		if r > maxStep/eta {
			return out
		}
	}
}

// judgeable reports whether v can be judged. NaN is not a value: an RL
// metric is NaN until the first episode ends (a mean of nothing), and a
// member is never stopped for lacking its metric.
func judgeable(v float64) bool { return !math.IsNaN(v) }
