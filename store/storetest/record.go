package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// testEditRecord: an owner's edit writes name, tags, note and baseline and
// nothing else, survives a fenced update, is found by its tag, and two
// concurrent tag edits both hold.
func testEditRecord(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	mustTask(t, s, u, "r1", 0, at(0))
	before := mustMove(t, s, "r1", core.StatusRunning, 4)

	name, note, yes := "ppo, lr 3e-4", "diverged after 1M steps — ünïcode", true
	got, err := s.EditRecord(ctx, "r1", store.RecordEdit{Name: &name, Note: &note, Baseline: &yes,
		Tags: func(cur []string) ([]string, error) { return append(cur, "paper", "fig-2"), nil }})
	if err != nil {
		t.Fatalf("EditRecord: %v", err)
	}
	want := before
	want.Name, want.Note, want.Baseline, want.Tags = name, note, true, []string{"paper", "fig-2"}
	want.UpdatedAt = got.UpdatedAt
	checkTask(t, "run as EditRecord returns it", got, want)
	checkTask(t, "run read after EditRecord", mustGet(t, s, "r1"), want)
	if !got.UpdatedAt.After(before.UpdatedAt) {
		t.Fatalf("EditRecord left UpdatedAt at %v, want it past %v", got.UpdatedAt, before.UpdatedAt)
	}

	// A later state change keeps the record.
	mustMove(t, s, "r1", core.StatusSucceeded, 4)
	if g := mustGet(t, s, "r1"); g.Name != name || g.Note != note || !g.Baseline || !slices.Equal(g.Tags, want.Tags) {
		t.Fatalf("after UpdateTask the record is %q %q %v %v", g.Name, g.Note, g.Baseline, g.Tags)
	}
	// Found by the edited fields: the tag, a part of the note (ASCII
	// without case), the baseline mark.
	mustTask(t, s, u, "r2", 0, at(time.Second))
	yesF, noF := true, false
	find := func(f store.Filter, want ...string) {
		t.Helper()
		found, _, err := s.ListTasks(ctx, f)
		if err != nil || !slices.Equal(ids(found), want) {
			t.Fatalf("ListTasks(%+v) after the edit: %v, %v; want %v", f, ids(found), err, want)
		}
	}
	find(store.Filter{Tag: "fig-2"}, "r1")
	find(store.Filter{Note: "DIVERGED after"}, "r1")
	find(store.Filter{Note: "ünïcode"}, "r1")
	find(store.Filter{Note: "converged"})
	find(store.Filter{Baseline: &yesF}, "r1")
	find(store.Filter{Baseline: &noF}, "r2")
	find(store.Filter{Baseline: &yesF, Note: "1M"}, "r1")

	// Nil fields stay; an empty note and false clear them.
	empty, no := "", false
	got, err = s.EditRecord(ctx, "r1", store.RecordEdit{Note: &empty, Baseline: &no})
	if err != nil || got.Name != name || got.Note != "" || got.Baseline || !slices.Equal(got.Tags, want.Tags) {
		t.Fatalf("EditRecord(note \"\", baseline false): %q %q %v %v, %v", got.Name, got.Note, got.Baseline, got.Tags, err)
	}

	// The tag function's error is EditRecord's, and nothing is written.
	bad := errors.New("bad tags")
	other := "other name"
	if _, err := s.EditRecord(ctx, "r1", store.RecordEdit{Name: &other,
		Tags: func([]string) ([]string, error) { return nil, bad }}); !errors.Is(err, bad) {
		t.Fatalf("EditRecord with a failing Tags: %v, want %v", err, bad)
	}
	if g := mustGet(t, s, "r1"); g.Name != name {
		t.Fatalf("a failed EditRecord wrote the name %q", g.Name)
	}

	f := func(e store.RecordEdit) {
		t.Helper()
		if _, err := s.EditRecord(ctx, "r-missing", e); !errors.Is(err, core.ErrNotFound) {
			t.Fatalf("EditRecord(missing): %v, want ErrNotFound", err)
		}
	}
	f(store.RecordEdit{Name: &name})
	f(store.RecordEdit{Tags: func(cur []string) ([]string, error) { return cur, nil }})

	// Concurrent edits each adding their own tag: every tag is kept.
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag := fmt.Sprint("c", i)
			_, errs[i] = s.EditRecord(ctx, "r1", store.RecordEdit{
				Tags: func(cur []string) ([]string, error) { return append(slices.Clone(cur), tag), nil }})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent EditRecord: %v", err)
	}
	g := mustGet(t, s, "r1")
	for i := range n {
		if !slices.Contains(g.Tags, fmt.Sprint("c", i)) {
			t.Fatalf("after %d concurrent tag edits the tags are %v: c%d lost", n, g.Tags, i)
		}
	}
	if len(g.Tags) != n+2 {
		t.Fatalf("after %d concurrent tag edits the tags are %v", n, g.Tags)
	}
}
