package store

import (
	"context"
	"time"

	"github.com/rlsched/rlsched/core"
)

// Pipeline is a named set of runs submitted as one unit (issue 29,
// API.md "Pipelines"): each step is a run, wired to the runs of the steps
// it names in after. Steps are in the file's order; a retry points a step
// at its new run.
type Pipeline struct {
	ID        string
	Name      string
	UserID    int64
	User      string // the owner's username, set by reads
	CreatedAt time.Time
	Steps     []PipelineStep
}

// PipelineStep is one step: its name and its latest run.
type PipelineStep struct {
	Name  string
	RunID string
}

// Pipelines is the part of Store behind pipelines. It is embedded in
// Store; every backend implements it.
type Pipelines interface {
	// CreatePipeline stores p and its steps' runs, runs[i] being step i's
	// (their ids set; p.Steps[i].RunID is set from them), with their edges,
	// in one transaction: all of it or, on any error, nothing. p.ID,
	// UserID and CreatedAt must be set; p.User is set from the owner.
	CreatePipeline(ctx context.Context, p *Pipeline, runs []*core.Task) error
	// Pipeline returns the pipeline with id; core.ErrNotFound.
	Pipeline(ctx context.Context, id string) (Pipeline, error)
	// RetryPipeline creates runs and points step steps[i] of pipeline id at
	// runs[i], in one transaction, only if each such step still names
	// was[i] (else core.ErrConflict: another retry came first) and nothing
	// is written; core.ErrNotFound for an unknown pipeline.
	RetryPipeline(ctx context.Context, id string, steps []int, was []string, runs []*core.Task) error
	// PipelineOfRun returns the id of the pipeline one of whose steps has
	// run id as its latest run; core.ErrNotFound when none has (a run of
	// no pipeline, or a step's run a retry replaced).
	PipelineOfRun(ctx context.Context, runID string) (string, error)
}

// CreatePipeline creates the pipeline and publishes each step's run.
func (ts *publisher) CreatePipeline(ctx context.Context, p *Pipeline, runs []*core.Task) error {
	defer ts.locks.lockAll(taskIDs(runs))()
	if err := ts.Store.CreatePipeline(ctx, p, runs); err != nil {
		return err
	}
	for _, t := range runs {
		ts.publishCreated(t)
	}
	return nil
}

// RetryPipeline retries the steps and publishes each new run.
func (ts *publisher) RetryPipeline(ctx context.Context, id string, steps []int, was []string, runs []*core.Task) error {
	defer ts.locks.lockAll(taskIDs(runs))()
	if err := ts.Store.RetryPipeline(ctx, id, steps, was, runs); err != nil {
		return err
	}
	for _, t := range runs {
		ts.publishCreated(t)
	}
	return nil
}

func taskIDs(ts []*core.Task) []string {
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	return ids
}
