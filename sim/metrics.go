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
	// RhoMax is the largest user's finish-time fairness (Themis' ρ, the
	// figure Themis minimises; UserSummary.Rho); RhoMean is the mean
	// over jobs.
	RhoMax  float64 `json:"rhoMax"`
	RhoMean float64 `json:"rhoMean"`
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
	// Rho is the mean finish-time fairness of their jobs (Themis, NSDI
	// '20): a job's JCT over the time it would take on its own 1/N of the
	// cluster, N the users with jobs in the system over its lifetime (a
	// job of g GPUs on a share of C/N < g runs g·N/C times slower). 1:
	// as fast as an equal share; above 1: worse off than with one.
	Rho float64 `json:"rho"`
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
		gpuSec, wait, jct, slow, rho float64
	}
	contending := contention(r.Jobs)
	var rhoSum float64
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
		s.LostGPUHours += j.GPUs * j.Lost.Hours()
		s.LongestWait = max(s.LongestWait, j.Wait().Seconds())
		a := users[j.User]
		if a == nil {
			a = &acc{UserSummary: UserSummary{User: j.User}}
			users[j.User] = a
		}
		a.Jobs++
		g := j.GPUs * j.Duration.Seconds()
		a.gpuSec += g
		total += g
		a.wait += j.Wait().Seconds()
		a.jct += j.JCT().Seconds()
		a.slow += sd
		a.LongestSec = max(a.LongestSec, j.Wait().Seconds())
		rho := finishTimeFairness(j, contending(j.Submit, j.End), r.GPUs)
		a.rho += rho
		rhoSum += rho
	}
	if len(r.Jobs) > 0 {
		s.RhoMean = rhoSum / float64(len(r.Jobs))
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
		a.MeanWait, a.MeanJCT, a.Slowdown, a.Rho = a.wait/n, a.jct/n, a.slow/n, a.rho/n
		s.RhoMax = max(s.RhoMax, a.Rho)
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

// finishTimeFairness is j's ρ with n users contending over its lifetime
// on a cluster of gpus GPUs (UserSummary.Rho). Its duration counts as at
// least a second, as in slowdown.
func finishTimeFairness(j JobResult, n float64, gpus int) float64 {
	alone := max(j.Duration, time.Second).Seconds()
	if gpus > 0 && j.GPUs > 0 {
		alone *= max(1, j.GPUs*max(n, 1)/float64(gpus))
	}
	return j.JCT().Seconds() / alone
}

// contention is the mean number of users with a job in the system
// (submitted, not ended) over [from, to], for jobs: each user's
// lifetimes merged, counted as a step function with its running integral.
func contention(jobs []JobResult) func(from, to time.Time) float64 {
	type span struct{ from, to time.Time }
	byUser := map[string][]span{}
	for _, j := range jobs {
		byUser[j.User] = append(byUser[j.User], span{j.Submit, j.End})
	}
	type step struct {
		at time.Time
		d  int
	}
	var steps []step
	for _, ss := range byUser {
		slices.SortFunc(ss, func(a, b span) int { return a.from.Compare(b.from) })
		cur := ss[0]
		for _, sp := range ss[1:] {
			if !sp.from.After(cur.to) {
				if sp.to.After(cur.to) {
					cur.to = sp.to
				}
				continue
			}
			steps = append(steps, step{cur.from, 1}, step{cur.to, -1})
			cur = sp
		}
		steps = append(steps, step{cur.from, 1}, step{cur.to, -1})
	}
	slices.SortFunc(steps, func(a, b step) int { return a.at.Compare(b.at) })
	// at[i] is a step's instant, n[i] the users from it to the next, area[i]
	// the user-seconds before it.
	var at []time.Time
	var n, area []float64
	level := 0
	for i, st := range steps {
		level += st.d
		if i+1 < len(steps) && steps[i+1].at.Equal(st.at) {
			continue
		}
		a := 0.0
		if k := len(at); k > 0 {
			a = area[k-1] + n[k-1]*st.at.Sub(at[k-1]).Seconds()
		}
		at, n, area = append(at, st.at), append(n, float64(level)), append(area, a)
	}
	integral := func(t time.Time) float64 { // user-seconds before t
		i, found := slices.BinarySearchFunc(at, t, func(a, b time.Time) int { return a.Compare(b) })
		if found {
			return area[i]
		}
		if i == 0 {
			return 0
		}
		return area[i-1] + n[i-1]*t.Sub(at[i-1]).Seconds()
	}
	return func(from, to time.Time) float64 {
		if !to.After(from) {
			// An instant job: the users at its instant.
			i, found := slices.BinarySearchFunc(at, from, func(a, b time.Time) int { return a.Compare(b) })
			if !found {
				i--
			}
			if i < 0 {
				return 1
			}
			return max(n[i], 1)
		}
		return (integral(to) - integral(from)) / to.Sub(from).Seconds()
	}
}
