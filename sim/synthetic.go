package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Synthetic describes a generated trace (docs/sim.md, "synthetic"): Jobs
// arriving as a Poisson process over Span, from Users of Zipf-like
// activity, asking for 1, 2, 4 or 8 GPUs (60/15/15/10 %), running a
// log-normal time of median Median (σ 1.5, capped at a week, as deep
// learning traces' durations are), a fraction High of them at priority 10,
// a fraction Preemptible of the others preemptible. Seed fixes it all.
type Synthetic struct {
	Jobs, Users       int
	Span, Median      time.Duration
	High, Preemptible float64
	Seed              uint64
}

// ParseSynthetic reads a spec such as
// "jobs=10000,users=50,span=720h,median=30m,high=0.1,preemptible=0.5,seed=1";
// what it does not name takes the default of DefaultSynthetic.
func ParseSynthetic(spec string) (Synthetic, error) {
	s := DefaultSynthetic
	for _, kv := range strings.Split(spec, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return s, fmt.Errorf("bad synthetic spec %q: write key=value pairs such as jobs=10000,users=50", kv)
		}
		var err error
		switch k {
		case "jobs":
			s.Jobs, err = strconv.Atoi(v)
		case "users":
			s.Users, err = strconv.Atoi(v)
		case "span":
			s.Span, err = time.ParseDuration(v)
		case "median":
			s.Median, err = time.ParseDuration(v)
		case "high":
			s.High, err = strconv.ParseFloat(v, 64)
		case "preemptible":
			s.Preemptible, err = strconv.ParseFloat(v, 64)
		case "seed":
			s.Seed, err = strconv.ParseUint(v, 10, 64)
		default:
			return s, fmt.Errorf("bad synthetic spec: unknown key %q (jobs, users, span, median, high, preemptible, seed)", k)
		}
		if err != nil {
			return s, fmt.Errorf("bad synthetic spec %q: %w", kv, err)
		}
	}
	switch {
	case s.Jobs < 0 || s.Jobs > 100_000_000:
		return s, fmt.Errorf("bad synthetic spec: jobs=%d, want 0 to 100000000", s.Jobs)
	case s.Users < 1:
		return s, fmt.Errorf("bad synthetic spec: users=%d, want at least 1", s.Users)
	case s.Span <= 0 || s.Median <= 0:
		return s, fmt.Errorf("bad synthetic spec: span and median must be positive")
	case s.High < 0 || s.High > 1 || s.Preemptible < 0 || s.Preemptible > 1:
		return s, fmt.Errorf("bad synthetic spec: high and preemptible are fractions from 0 to 1")
	}
	return s, nil
}

// DefaultSynthetic is a month of 10,000 jobs of 50 users.
var DefaultSynthetic = Synthetic{Jobs: 10_000, Users: 50, Span: 30 * 24 * time.Hour, Median: 30 * time.Minute, Seed: 1}

// Trace generates the trace, submissions from t0 = 2026-01-01 UTC.
func (s Synthetic) Trace() *Trace {
	rng := rand.New(rand.NewPCG(s.Seed, 0x5eed))
	tr := &Trace{Jobs: make([]Job, 0, s.Jobs)}
	weights := make([]float64, s.Users)
	sum := 0.0
	for i := range weights {
		sum += 1 / float64(i+1)
		weights[i] = sum
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mean := float64(s.Span) / float64(max(s.Jobs, 1))
	const week = 7 * 24 * time.Hour
	for i := range s.Jobs {
		at = at.Add(time.Duration(rng.ExpFloat64() * mean))
		u, _ := slices.BinarySearch(weights, rng.Float64()*sum)
		u = min(u, len(weights)-1)
		gpus := 1
		switch p := rng.Float64(); {
		case p < 0.10:
			gpus = 8
		case p < 0.25:
			gpus = 4
		case p < 0.40:
			gpus = 2
		}
		d := time.Duration(float64(s.Median) * math.Exp(1.5*rng.NormFloat64()))
		j := Job{ID: fmt.Sprintf("j%07d", i), User: fmt.Sprintf("user%03d", u), Submit: at, Duration: min(max(d, time.Second), week), GPUs: gpus}
		if rng.Float64() < s.High {
			j.Priority = 10
		} else {
			j.Preemptible = rng.Float64() < s.Preemptible
		}
		tr.Jobs = append(tr.Jobs, j)
	}
	return tr
}
