package sweep

import (
	"fmt"
	"math/rand/v2"

	"github.com/rlsched/rlsched/sweep/tpe"
)

// suggestStream is the PCG stream of a tpe sweep's proposal 0; proposal i
// draws from stream suggestStream+i. Each proposal's draws depend only on
// RandomSeed, its index and the trials, so two masters proposing for the
// same sweep from the same store propose the same members.
const suggestStream = 0x7470650000000000 // "tpe"

// DefaultInFlight is how many proposals of a tpe sweep without maxParallel
// run at once: TPE's startup trials, drawn at random before it models.
const DefaultInFlight = 10

// Proposals is how many proposals a tpe sweep makes in all (Budget ÷ its
// seeds); 0 for grid and random sweeps, whose members are all made at once.
func (s *Spec) Proposals() int {
	if s.Method != TPE {
		return 0
	}
	return s.samples
}

// SeedsPerProposal is how many members each proposal (or cell) runs.
func (s *Spec) SeedsPerProposal() int { return max(len(s.Seeds), 1) }

// InFlight is how many of a tpe sweep's proposals may be unfinished at
// once: maxParallel's worth of members (at least one proposal), or
// DefaultInFlight without maxParallel; never more than Proposals.
func (s *Spec) InFlight() int {
	n := DefaultInFlight
	if s.MaxParallel > 0 {
		n = max(1, s.MaxParallel/s.SeedsPerProposal())
	}
	return min(n, s.Proposals())
}

// Suggest is proposal index of a tpe sweep: TPE's suggestion from trials
// (the proposals before it as their members stand, Outcomes' Trial) as its
// members, numbered from index × SeedsPerProposal.
func (s *Spec) Suggest(trials []tpe.Trial, index int) ([]Member, error) {
	if s.Method != TPE {
		return nil, fmt.Errorf("cannot suggest for a %s sweep: only tpe proposes", s.Method)
	}
	if index < 0 || index >= s.Proposals() {
		return nil, fmt.Errorf("cannot suggest proposal %d: the budget has %d", index, s.Proposals())
	}
	rng := rand.New(rand.NewPCG(s.RandomSeed, suggestStream+uint64(index)))
	x, err := tpe.Suggest(s.Space(), trials, rng, tpe.Options{Goal: s.Goal})
	if err != nil {
		return nil, err
	}
	return s.Proposal(x, index*s.SeedsPerProposal())
}

// Initial is what a sweep's submission creates: every member of a grid or
// random sweep; a tpe sweep's first InFlight proposals (each suggested
// with the ones before it running), the rest proposed by the master's
// sweep controller as they end.
func (s *Spec) Initial() ([]Member, error) {
	if s.Method != TPE {
		return s.Members(), nil
	}
	var out []Member
	var trials []tpe.Trial
	for i := range s.InFlight() {
		ms, err := s.Suggest(trials, i)
		if err != nil {
			return nil, err
		}
		x, err := s.Point(ms[0].Cell)
		if err != nil {
			return nil, err
		}
		trials = append(trials, tpe.Trial{Params: x, State: tpe.Running})
		out = append(out, ms...)
	}
	return out, nil
}
