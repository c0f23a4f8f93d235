package store_test

import (
	"context"
	"slices"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// An edit of a run's record is published, and the next state change's
// event, built from the remembered fields without a read-back, carries it.
func TestPublishing_EditRecord(t *testing.T) {
	ctx := context.Background()
	st, sink, task := publishedRun(t)
	cur := sink.take()[0]

	name, note := "renamed", "a note"
	if _, err := st.EditRecord(ctx, task.ID, store.RecordEdit{Name: &name, Note: &note,
		Tags: func(cur []string) ([]string, error) { return append(cur, "paper"), nil }}); err != nil {
		t.Fatal(err)
	}
	ev := sink.take()
	if len(ev) != 1 || ev[0].Name != name || ev[0].Note != note || !slices.Equal(ev[0].Tags, []string{"paper"}) {
		t.Fatalf("after the edit: %+v", ev)
	}
	next := cur
	next.Status, next.Fence, next.Worker = core.StatusDispatched, 3, "w1"
	if err := st.UpdateTask(ctx, &next, store.Expect{Fence: 0, Status: core.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	ev = sink.take()
	if len(ev) != 1 || ev[0].Status != core.StatusDispatched || ev[0].Name != name || ev[0].Note != note ||
		!slices.Equal(ev[0].Tags, []string{"paper"}) {
		t.Fatalf("the update after the edit published %+v", ev)
	}
	if _, err := st.EditRecord(ctx, "r-unknown", store.RecordEdit{Name: &name}); err == nil {
		t.Fatal("an edit of an unknown run succeeded")
	}
	if ev := sink.take(); len(ev) != 0 {
		t.Fatalf("a failed edit published %+v", ev)
	}
}
