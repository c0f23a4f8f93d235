package sim

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/rlsched/rlsched/core"
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
	// GPUFraction is a share of one GPU (0 < f < 1, in hundredths; GPUs
	// then 0); CPUMillis (thousandths of a core), MemoryMB, GPUMemoryMB
	// and GPUType what it asks of a worker besides (issue 26 and 28's
	// requests; zero: nothing). The planner places by all of them, as the
	// master does.
	GPUFraction                      float64
	CPUMillis, MemoryMB, GPUMemoryMB int64
	GPUType                          []string
}

// gpuCount is what j asks for in GPUs: its whole GPUs or its share.
func (j *Job) gpuCount() float64 { return float64(j.GPUs) + j.GPUFraction }

// weight is what j's run weighs in fair share a second, as the store
// charges it (core.UsageWeight): its GPUs, or its cores for a CPU-only
// job (one core when it asks for none).
func (j *Job) weight() float64 {
	return core.UsageWeight(j.gpuCount(), float64(j.CPUMillis)/1000)
}

// WholeGPUs is the trace with every share of a GPU rounded up to a whole
// one, for a side-by-side with the shares kept (rlsched sim --whole-gpus).
func (t *Trace) WholeGPUs() {
	for i := range t.Jobs {
		if j := &t.Jobs[i]; j.GPUFraction > 0 {
			j.GPUs, j.GPUFraction = 1, 0
		}
	}
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
	case j.GPUFraction < 0 || j.GPUFraction >= 1 || (j.GPUFraction > 0 && j.GPUs > 0):
		t.skip(j.ID, fmt.Sprintf("it asks for %d GPUs and a share of %g of one: a job takes a share of one GPU or whole GPUs", j.GPUs, j.GPUFraction))
	case j.CPUMillis < 0 || j.MemoryMB < 0 || j.GPUMemoryMB < 0:
		t.skip(j.ID, fmt.Sprintf("it asks for %d thousandths of a core, %d MiB of memory and %d MiB of GPU memory: none may be negative", j.CPUMillis, j.MemoryMB, j.GPUMemoryMB))
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
