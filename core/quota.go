package core

import (
	"math"
	"time"
)

// Quota caps what a user may have active (DISPATCHED + RUNNING) at once:
// GPUs and runs; nil is no cap (API.md "Scheduling policy").
type Quota struct {
	GPUs *int `json:"gpus"`
	Runs *int `json:"runs"`
}

// CPURunWeight is what a core of a run without GPUs counts in a user's
// usage, in GPUs (UsageWeight; API.md: a CPU-only run counts 0.25 GPU a core).
const CPURunWeight = 0.25

// Decay is v, a usage known at one instant, d later: halved every
// halfLife (halfLife ≤ 0: no decay). d < 0 grows it back, for a usage
// added at an instant before the one it is kept at.
func Decay(v float64, d, halfLife time.Duration) float64 {
	if halfLife <= 0 || v == 0 {
		return v
	}
	return v * math.Exp2(-d.Seconds()/halfLife.Seconds())
}
