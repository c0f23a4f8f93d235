package sim

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Summary is a simulation's figures (docs/sim.md, "What it reports").
type Summary struct {
	Policy   string `json:"policy"`
	Jobs     int    `json:"jobs"`    // finished
	Skipped  int    `json:"skipped"` // not simulated, or never started
	GPUs     int    `json:"gpus"`
	JCT      Stats  `json:"jct"`  // submission to end
	Wait     Stats  `json:"wait"` // submission to first start
	Slowdown Stats  `json:"slowdown"`
	// Makespan is from the first submission to the last end, in seconds.
	Makespan float64 `json:"makespanSeconds"`
	// Allocation is the share of the cluster's GPU time held by runs;
	// Utilisation the share that ran work kept (lost work excluded). A
	// simulated run keeps its GPUs busy: there is no idle GPU in a run.
	Allocation  float64 `json:"allocation"`
	Utilisation float64 `json:"utilisation"`
	Preemptions int64   `json:"preemptions"`
	// LostGPUHours is the work lost to preemptions and faults; LongestWait
	// the longest a job waited to start, in seconds (starvation).
	LostGPUHours float64       `json:"lostGpuHours"`
	LongestWait  float64       `json:"longestWaitSeconds"`
	Events       int64         `json:"events"`
	Passes       int64         `json:"plannerPasses"`
	Users        []UserSummary `json:"users"`
	// Fairness is the largest user's mean slowdown over the smallest's
	// (1: every user waited alike in proportion to their jobs).
	Fairness float64 `json:"fairness"`
}

// Stats are a distribution's mean and percentiles. Durations are in
// seconds in JSON; a slowdown is a ratio.
type Stats struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// UserSummary is one user's share: their jobs, GPU time and how long
// they waited.
type UserSummary struct {
	User       string  `json:"user"`
	Jobs       int     `json:"jobs"`
	GPUHours   float64 `json:"gpuHours"`
	Share      float64 `json:"share"` // of the GPU time all finished jobs used
	MeanWait   float64 `json:"meanWaitSeconds"`
	MeanJCT    float64 `json:"meanJctSeconds"`
	Slowdown   float64 `json:"meanSlowdown"` // JCT over duration
	LongestSec float64 `json:"longestWaitSeconds"`
}

// Summarize computes r's figures.
func (r *Result) Summarize() Summary {
	s := Summary{Policy: r.Policy.Name, Jobs: len(r.Jobs), Skipped: len(r.Skipped), GPUs: r.GPUs,
		Preemptions: r.Preemptions, Events: r.Events, Passes: r.Passes}
	jct := make([]float64, 0, len(r.Jobs))
	wait := make([]float64, 0, len(r.Jobs))
	slow := make([]float64, 0, len(r.Jobs))
	var last time.Time
	type acc struct {
		UserSummary
		gpuSec, wait, jct, slow float64
	}
	users := map[string]*acc{}
	var total float64
	for _, j := range r.Jobs {
		jct = append(jct, j.JCT().Seconds())
		wait = append(wait, j.Wait().Seconds())
		sd := slowdown(j)
		slow = append(slow, sd)
		if j.End.After(last) {
			last = j.End
		}
		s.LostGPUHours += float64(j.GPUs) * j.Lost.Hours()
		s.LongestWait = max(s.LongestWait, j.Wait().Seconds())
		a := users[j.User]
		if a == nil {
			a = &acc{UserSummary: UserSummary{User: j.User}}
			users[j.User] = a
		}
		a.Jobs++
		g := float64(j.GPUs) * j.Duration.Seconds()
		a.gpuSec += g
		total += g
		a.wait += j.Wait().Seconds()
		a.jct += j.JCT().Seconds()
		a.slow += sd
		a.LongestSec = max(a.LongestSec, j.Wait().Seconds())
	}
	s.JCT, s.Wait, s.Slowdown = stats(jct), stats(wait), stats(slow)
	if !last.IsZero() {
		s.Makespan = last.Sub(r.Start).Seconds()
	}
	if span := r.End.Sub(r.Start).Seconds(); span > 0 && r.GPUs > 0 {
		s.Allocation = r.AllocatedGPUSeconds / (span * float64(r.GPUs))
		s.Utilisation = r.UsefulGPUSec / (span * float64(r.GPUs))
	}
	lo, hi := math.Inf(1), 0.0
	for _, a := range users {
		n := float64(a.Jobs)
		a.GPUHours = a.gpuSec / 3600
		if total > 0 {
			a.Share = a.gpuSec / total
		}
		a.MeanWait, a.MeanJCT, a.Slowdown = a.wait/n, a.jct/n, a.slow/n
		lo, hi = min(lo, a.Slowdown), max(hi, a.Slowdown)
		s.Users = append(s.Users, a.UserSummary)
	}
	if len(users) > 0 && lo > 0 {
		s.Fairness = hi / lo
	}
	slices.SortFunc(s.Users, func(a, b UserSummary) int {
		if c := cmp.Compare(b.GPUHours, a.GPUHours); c != 0 {
			return c
		}
		return cmp.Compare(a.User, b.User)
	})
	return s
}

// slowdown is j's JCT over its duration; a job of no duration counts its
// JCT over one second, so an instant job that waited still counts.
func slowdown(j JobResult) float64 {
	d := max(j.Duration, time.Second)
	return j.JCT().Seconds() / d.Seconds()
}

// stats is the mean and the nearest-rank percentiles of v (sorted in
// place).
func stats(v []float64) Stats {
	if len(v) == 0 {
		return Stats{}
	}
	slices.Sort(v)
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(v)))) - 1
		return v[min(max(i, 0), len(v)-1)]
	}
	return Stats{Mean: sum / float64(len(v)), P50: rank(0.50), P99: rank(0.99), Max: v[len(v)-1]}
}
