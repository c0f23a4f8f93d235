package sim

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Job is one run of a trace: who submitted it when, what it asks for and
// how long it runs once started (its work; a preemption or a fault loses
// what it did since its last checkpoint, which it runs again).
type Job struct {
	ID          string
	User        string
	Submit      time.Time
	Duration    time.Duration
	GPUs        int
	Priority    int
	Preemptible bool
}

// Skipped is a job of a trace that was not simulated, or never started,
// and why.
type Skipped struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// Trace is what a reader made of a trace file: the jobs to simulate,
// sorted by submission, and those it could not take, each with its reason.
type Trace struct {
	Jobs    []Job
	Skipped []Skipped
	// Ignored are columns or fields of the file the reader does not use.
	Ignored []string
}

// add takes j, or skips it with its reason when it cannot be simulated.
func (t *Trace) add(j Job) {
	switch {
	case j.ID == "":
		t.skip("(no id)", "it has no id")
	case j.Duration < 0:
		t.skip(j.ID, fmt.Sprintf("its duration is negative (%v)", j.Duration))
	case j.GPUs < 0:
		t.skip(j.ID, fmt.Sprintf("it asks for %d GPUs", j.GPUs))
	case j.Submit.IsZero():
		t.skip(j.ID, "it has no submission time")
	default:
		t.Jobs = append(t.Jobs, j)
	}
}

func (t *Trace) skip(id, reason string) {
	t.Skipped = append(t.Skipped, Skipped{ID: id, Reason: reason})
}

// sortJobs orders the jobs by submission (a trace out of order is taken
// as it would have arrived), then by id.
func (t *Trace) sortJobs() {
	slices.SortStableFunc(t.Jobs, func(a, b Job) int {
		if c := a.Submit.Compare(b.Submit); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}
