package stats

import (
	"fmt"
	"math"
)

// Score is a run's score from its series (points as [step, value] in step
// order): the mean of the values of its last window points (window < 1 is
// 1: the final value). ok is false when the series is empty or the score is
// not finite (a NaN or ±Inf among those points): such a run is skipped.
func Score(points [][2]float64, window int) (score float64, ok bool) {
	if len(points) == 0 {
		return 0, false
	}
	window = max(1, min(window, len(points)))
	sum := 0.0
	for _, p := range points[len(points)-window:] {
		sum += p[1]
	}
	score = sum / float64(window)
	return score, finite(score)
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Span is the range a task's scores are normalised against: a score s
// becomes (s - Lo) / (Hi - Lo), so Lo maps to 0 and Hi to 1.
type Span struct{ Lo, Hi float64 }

// Normalize maps every score of every group in place by its task's span:
// spans[t] for task t. A span that is not finite or is empty (Lo == Hi) is
// an error naming the task.
func Normalize(groups []Group, spans []Span) error {
	for t, sp := range spans {
		if !finite(sp.Lo) || !finite(sp.Hi) || sp.Lo == sp.Hi {
			return fmt.Errorf("task %d: cannot normalise by min %g, max %g: they must be finite and differ", t, sp.Lo, sp.Hi)
		}
	}
	for _, g := range groups {
		if len(g.Scores) > len(spans) {
			return fmt.Errorf("BUG: %d tasks, %d spans", len(g.Scores), len(spans))
		}
		for t, xs := range g.Scores {
			sp := spans[t]
			for i, x := range xs {
				xs[i] = (x - sp.Lo) / (sp.Hi - sp.Lo)
			}
		}
	}
	return nil
}

// BaselineSpans are the spans of normalising to a baseline group: in each
// task, lo (the lowest score of any group's run in the task, when lo is
// NaN) maps to 0 and the baseline's mean score in the task to 1. A task the
// baseline has no run in is an error naming it.
func BaselineSpans(groups []Group, baseline int, lo float64) ([]Span, error) {
	if baseline < 0 || baseline >= len(groups) {
		return nil, fmt.Errorf("BUG: baseline %d of %d groups", baseline, len(groups))
	}
	tasks := 0
	for _, g := range groups {
		tasks = max(tasks, len(g.Scores))
	}
	spans := make([]Span, tasks)
	b := groups[baseline].Scores
	for t := range spans {
		if t >= len(b) || len(b[t]) == 0 {
			return nil, fmt.Errorf("task %d: the baseline group has no run in it", t)
		}
		spans[t] = Span{Lo: lo, Hi: mean(b[t])}
		if math.IsNaN(lo) {
			spans[t].Lo = math.Inf(1)
			for _, g := range groups {
				if t < len(g.Scores) {
					for _, x := range g.Scores[t] {
						spans[t].Lo = min(spans[t].Lo, x)
					}
				}
			}
		}
	}
	return spans, nil
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// DropNonFinite removes the scores that are NaN or ±Inf from g, in place,
// and says how many it removed: such runs are skipped, and the answer says
// how many were.
func DropNonFinite(g *Group) (skipped int) {
	for t, xs := range g.Scores {
		kept := xs[:0]
		for _, x := range xs {
			if finite(x) {
				kept = append(kept, x)
			} else {
				skipped++
			}
		}
		g.Scores[t] = kept
	}
	return skipped
}
