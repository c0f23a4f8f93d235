package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rlsched/rlsched/sweep/earlystop"
	"github.com/rlsched/rlsched/sweep/goal"
	"github.com/rlsched/rlsched/sweep/reference"
	"github.com/rlsched/rlsched/sweep/tpe"
)

// runSweepSearch measures the sweep's search and early stopping (issue 35)
// on the reference problem (sweep/reference: four params with a known
// optimum and a learning curve a configuration), in process, over seeded
// sweeps: how many members TPE needs to get within 5% of the optimum
// beside random search, and what share of a random sweep's steps (its
// GPU-seconds) ASHA and the median rule save beside the same sweep run to
// the end, with the final value of the best member each keeps. The
// figures are counts, not times: they do not move with the machine's load.
func runSweepSearch(e *env) (*report, error) {
	seeds := pick(e, 5, 10)
	const limit = 1000
	rep := &report{size: fmt.Sprintf("%d seeded sweeps a method; the reference problem's 4 params; %d members of %d steps for early stopping",
		seeds, reference.Members, reference.Steps)}
	began := time.Now()
	var tpeN, randN []int
	for seed := range uint64(seeds) {
		n, err := reference.TrialsToReach(rand.New(rand.NewPCG(seed, 1)), tpe.Options{}, limit)
		if err != nil {
			return nil, err
		}
		r, err := reference.TrialsToReach(rand.New(rand.NewPCG(seed, 2)), tpe.Options{StartupTrials: limit + 1}, limit)
		if err != nil {
			return nil, err
		}
		tpeN, randN = append(tpeN, n), append(randN, r)
	}
	tm, rm := medianInts(tpeN), medianInts(randN)
	t := rep.newTable("Members until one is within 5% of the optimum (median of the seeds)", "search", "members (median)", "ratio to random search", "each seed")
	t.add("TPE (sweep/tpe)", fmt.Sprintf("%g", tm), ratioStr(tm, rm), fmt.Sprint(tpeN))
	t.add("reference: random search", fmt.Sprintf("%g", rm), "1.00", fmt.Sprint(randN))
	rep.goal(tm < rm, "TPE within 5%% of the optimum in fewer members than random search: %g against %g (median of %d seeds)", tm, rm, seeds)

	stoppers := []struct {
		name string
		cfg  earlystop.Config
	}{
		{"ASHA, reduction factor 3, from step 37", earlystop.Config{Method: earlystop.ASHA, Goal: goal.Maximize, MinSteps: reference.Steps / 27}},
		{"median stopping rule, from step 100", earlystop.Config{Method: earlystop.Median, Goal: goal.Maximize, MinSteps: reference.Steps / 10}},
	}
	st := rep.newTable("A random sweep stopped early, beside the same sweep run to the end", "early stopping", "steps saved (median)", "steps saved (worst seed)",
		"seeds whose best is within 5% of the full sweep's best")
	var ashaSaved []float64
	ashaAll := true
	for i, s := range stoppers {
		var saved []float64
		within := 0
		for seed := range uint64(seeds) {
			xs, err := reference.RandomSweep(rand.New(rand.NewPCG(seed, 3)), reference.Members)
			if err != nil {
				return nil, err
			}
			fullSteps, fullBest := reference.Simulate(rand.New(rand.NewPCG(seed, 4)), xs, func(string, int64, float64) bool { return false })
			stopper, err := earlystop.New(s.cfg)
			if err != nil {
				return nil, err
			}
			steps, best := reference.Simulate(rand.New(rand.NewPCG(seed, 4)), xs, func(m string, step int64, v float64) bool {
				d, _ := stopper.Report(m, step, v)
				return d.Stop
			})
			saved = append(saved, 1-float64(steps)/float64(fullSteps))
			if best >= 0.95*fullBest {
				within++
			}
		}
		slices.Sort(saved)
		st.add(s.name, fmt.Sprintf("%.0f%%", 100*median(saved)), fmt.Sprintf("%.0f%%", 100*saved[0]), fmt.Sprintf("%d of %d", within, seeds))
		if i == 0 {
			ashaSaved, ashaAll = saved, within == seeds
		}
	}
	st.add("reference: every member to the end", "0%", "0%", "–")
	rep.goal(median(ashaSaved) >= 0.5 && ashaAll, "ASHA saves ≥ 50%% of the random sweep's steps with its best within 5%% of the full sweep's: %.0f%% saved (median; worst seed %.0f%%), best within 5%% on every seed: %v",
		100*median(ashaSaved), 100*ashaSaved[0], ashaAll)
	rep.note("In process, no master: the pure packages the sweep controller (sweepctl) drives, on sweep/reference's problem, the same loops as their reference tests (sweep/tpe, sweep/earlystop). A member's steps stand for its GPU-seconds; %d members means none of %d reached the 5%%. %v for all of it on this machine.", limit+1, limit, time.Since(began).Round(time.Millisecond))
	rep.result = result{metric: "tpe_members_to_5pct", value: tm, unit: "members", ref: "random_search", refValue: rm}
	return rep, nil
}

func medianInts(xs []int) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	return float64(s[(n-1)/2]+s[n/2]) / 2
}
