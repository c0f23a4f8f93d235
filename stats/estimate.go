package stats

import (
	"fmt"
	"math"
	"slices"
)

// Group is one thing compared: Scores[t] are its runs' scores in task t,
// in any order, every one finite. A task the group has no run in is empty
// (or beyond the end of Scores) and left out of the group's estimates.
type Group struct {
	Scores [][]float64
}

// N is the number of the group's scores, over every task.
func (g Group) N() int {
	n := 0
	for _, xs := range g.Scores {
		n += len(xs)
	}
	return n
}

// Stat names an aggregate.
type Stat string

const (
	// StatMean is the mean over tasks of each task's mean score (rliable's
	// aggregate_mean).
	StatMean Stat = "mean"
	// StatMedian is the median over tasks of each task's mean score
	// (rliable's aggregate_median); with one task, that task's mean.
	StatMedian Stat = "median"
	// StatIQM is the interquartile mean of the pooled scores of every run
	// in every task: floor(n/4) trimmed from each end of the n sorted
	// scores, the rest averaged, as scipy.stats.trim_mean(x, 0.25).
	StatIQM Stat = "iqm"
	// StatGap is the optimality gap: gamma minus the mean of the pooled
	// scores, each clipped at gamma from above (Options.Gamma; 1 for
	// normalised scores).
	StatGap Stat = "gap"
)

// Stats are the aggregates in the order answers list them.
var Stats = []Stat{StatIQM, StatMean, StatMedian, StatGap}

// ParseStat is the Stat named s.
func ParseStat(s string) (Stat, error) {
	for _, st := range Stats {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("stat %q is not one of iqm, mean, median, gap", s)
}

// The point estimates, as the textbook (and rliable) computes them; the
// bootstrap computes the same from resampled counts (bootstrap.go), and
// tests hold the two to each other and to numpy.

// Mean is StatMean of scores (by task).
func Mean(scores [][]float64) float64 {
	s, n := 0.0, 0
	for _, xs := range scores {
		if len(xs) > 0 {
			s += mean(xs)
			n++
		}
	}
	return s / float64(n)
}

// Median is StatMedian of scores (by task).
func Median(scores [][]float64) float64 {
	var ms []float64
	for _, xs := range scores {
		if len(xs) > 0 {
			ms = append(ms, mean(xs))
		}
	}
	slices.Sort(ms)
	return median(ms)
}

// median of sorted xs, the middle two averaged when their number is even.
func median(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// IQM is StatIQM of scores (by task).
func IQM(scores [][]float64) float64 {
	var all []float64
	for _, xs := range scores {
		all = append(all, xs...)
	}
	slices.Sort(all)
	k := trimmed(len(all))
	return mean(all[k : len(all)-k])
}

// trimmed is how many of n sorted scores the IQM cuts from each end: as
// scipy's trim_mean, int(0.25 * n).
func trimmed(n int) int { return n / 4 }

// Gap is StatGap of scores (by task) with threshold gamma.
func Gap(scores [][]float64, gamma float64) float64 {
	s, n := 0.0, 0
	for _, xs := range scores {
		for _, x := range xs {
			s += min(x, gamma)
			n++
		}
	}
	return gamma - s/float64(n)
}

// Profile is the performance profile of scores (by task) at tau: the
// fraction of the pooled scores above tau (rliable's run score
// distribution).
func Profile(scores [][]float64, tau float64) float64 {
	above, n := 0, 0
	for _, xs := range scores {
		for _, x := range xs {
			if x > tau {
				above++
			}
			n++
		}
	}
	return float64(above) / float64(n)
}

// ProbImprovement is the probability of improvement of x over y (each by
// task), as rliable defines it: over the tasks both have runs in, the mean
// of P(X > Y), a run of x against a run of y drawn at random, a tie
// counting one half (the Mann–Whitney U over n·m). An error when they share
// no task.
func ProbImprovement(x, y [][]float64) (float64, error) {
	s, n := 0.0, 0
	for t := range min(len(x), len(y)) {
		if len(x[t]) == 0 || len(y[t]) == 0 {
			continue
		}
		u := 0.0
		for _, a := range x[t] {
			for _, b := range y[t] {
				switch {
				case a > b:
					u++
				case a == b:
					u += 0.5
				}
			}
		}
		s += u / float64(len(x[t])*len(y[t]))
		n++
	}
	if n == 0 {
		return math.NaN(), fmt.Errorf("the two groups have no task in common")
	}
	return s / float64(n), nil
}

// Estimate is the point estimate of st over scores (by task).
func Estimate(st Stat, scores [][]float64, gamma float64) float64 {
	switch st {
	case StatMean:
		return Mean(scores)
	case StatMedian:
		return Median(scores)
	case StatIQM:
		return IQM(scores)
	case StatGap:
		return Gap(scores, gamma)
	}
	panic("BUG: unknown stat " + string(st))
}
