package storetest

import (
	"errors"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// testPipelines: a pipeline and its runs with their edges are stored in
// one transaction or not at all; a retry moves steps to new runs only
// while they still name the runs it read.
func testPipelines(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	p := &store.Pipeline{ID: "pl1", Name: "train-eval", UserID: u.ID, CreatedAt: at(0),
		Steps: []store.PipelineStep{{Name: "train"}, {Name: "eval"}}}
	runs := []*core.Task{
		{ID: "t1", UserID: u.ID, CreatedAt: at(0)},
		{ID: "e1", UserID: u.ID, CreatedAt: at(1), After: []core.Dep{{Run: "t1", When: core.WhenSucceeded}}, InputsFrom: []string{"t1"}},
	}
	if err := s.CreatePipeline(ctx, p, runs); err != nil {
		t.Fatal(err)
	}
	if p.User != "alice" || p.Steps[1].RunID != "e1" || runs[0].User != "alice" {
		t.Fatalf("created: %+v", p)
	}
	got, err := s.Pipeline(ctx, "pl1")
	if err != nil || got.Name != "train-eval" || got.User != "alice" || len(got.Steps) != 2 ||
		got.Steps[0] != (store.PipelineStep{Name: "train", RunID: "t1"}) || !got.CreatedAt.Equal(at(0)) {
		t.Fatalf("Pipeline = %+v, %v", got, err)
	}
	if kids, _ := s.WaitingChildren(ctx, "t1"); len(kids) != 1 || kids[0] != "e1" {
		t.Fatalf("the pipeline's edges: %v", kids)
	}
	if _, err := s.Pipeline(ctx, "nope"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("unknown pipeline: %v", err)
	}

	// All or nothing: a taken run id rolls the pipeline back.
	before := countRuns(t, s)
	bad := &store.Pipeline{ID: "pl2", Name: "x", UserID: u.ID, CreatedAt: at(2), Steps: []store.PipelineStep{{Name: "a"}, {Name: "b"}}}
	if err := s.CreatePipeline(ctx, bad, []*core.Task{{ID: "n1", UserID: u.ID}, {ID: "t1", UserID: u.ID}}); err == nil {
		t.Fatal("a pipeline with a taken run id was stored")
	}
	if _, err := s.Pipeline(ctx, "pl2"); !errors.Is(err, core.ErrNotFound) || countRuns(t, s) != before {
		t.Fatalf("a failed pipeline left something: %v, %d runs (was %d)", err, countRuns(t, s), before)
	}

	// Retry: step 1 to a new run; a second retry from the old run conflicts.
	e2 := &core.Task{ID: "e2", UserID: u.ID, CreatedAt: at(3), RerunOf: "e1", After: []core.Dep{{Run: "t1", When: core.WhenSucceeded}}}
	if err := s.RetryPipeline(ctx, "pl1", []int{1}, []string{"e1"}, []*core.Task{e2}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Pipeline(ctx, "pl1"); got.Steps[1].RunID != "e2" || got.Steps[0].RunID != "t1" {
		t.Fatalf("after retry: %+v", got.Steps)
	}
	for run, want := range map[string]string{"t1": "pl1", "e2": "pl1", "e1": "", "n1": ""} {
		if got, err := s.PipelineOfRun(ctx, run); got != want || (want == "") != errors.Is(err, core.ErrNotFound) {
			t.Errorf("PipelineOfRun(%s) = %q, %v; want %q", run, got, err, want)
		}
	}
	e3 := &core.Task{ID: "e3", UserID: u.ID}
	if err := s.RetryPipeline(ctx, "pl1", []int{1}, []string{"e1"}, []*core.Task{e3}); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("stale retry: %v, want ErrConflict", err)
	}
	if _, err := s.Task(ctx, "e3"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("a refused retry stored its run: %v", err)
	}
	if err := s.RetryPipeline(ctx, "nope", nil, nil, nil); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("retry of an unknown pipeline: %v", err)
	}
}
