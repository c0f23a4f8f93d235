package storetest

import (
	"fmt"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// LargeBatch (not part of Run, which is the contract every backend is held
// to unchanged; each backend calls it beside Run) pins down the set-based
// batch writes of issue 19 past what UpdateTasksMixed covers: a batch
// larger than one statement's chunk (512 rows), a size that is no bucket
// (so padding rows must match nothing), fenced and missing rows spread
// through it, and chains of up to three rows of one run far apart.
func LargeBatch(t *testing.T, s store.Store) {
	const runs = 700
	u := mustUser(t, s, "alice")
	ts := make([]*core.Task, runs)
	for i := range ts {
		ts[i] = &core.Task{ID: fmt.Sprintf("r%04d", i), UserID: u.ID}
	}
	for i, err := range s.CreateTasks(t.Context(), ts) {
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	var us []store.Update
	var want []error
	final := map[string]core.Task{}
	add := func(id string, from store.Expect, to core.Status, fence uint64, w error) {
		tk := core.Task{ID: id, Status: to, Fence: fence, Worker: fmt.Sprintf("w-%s-%d", id, fence)}
		us = append(us, store.Update{Task: &tk, Expect: from})
		want = append(want, w)
		if w == nil {
			final[id] = tk
		}
	}
	queued := store.Expect{Status: core.StatusQueued}
	for i := range runs {
		id := ts[i].ID
		switch {
		case i%97 == 5:
			add(id, store.Expect{Fence: 3, Status: core.StatusQueued}, core.StatusDispatched, 4, core.ErrFenced)
		case i%101 == 7:
			add(id+"-missing", queued, core.StatusDispatched, 1, core.ErrNotFound)
			add(id, queued, core.StatusDispatched, 1, nil)
		default:
			add(id, queued, core.StatusDispatched, 1, nil)
		}
	}
	// Chains: the second and third rows expect the write before them, and
	// come hundreds of rows later, in other chunks.
	for _, i := range []int{0, 300, 699} {
		id := ts[i].ID
		add(id, store.Expect{Fence: 1, Status: core.StatusDispatched}, core.StatusRunning, 2, nil)
	}
	for _, i := range []int{0, 699} {
		id := ts[i].ID
		add(id, store.Expect{Fence: 2, Status: core.StatusRunning}, core.StatusSucceeded, 3, nil)
	}
	// A chain that breaks: its second row expects a state never written.
	add(ts[1].ID, store.Expect{Fence: 9, Status: core.StatusDispatched}, core.StatusRunning, 10, core.ErrFenced)
	errs := s.UpdateTasks(t.Context(), us)
	if len(errs) != len(us) {
		t.Fatalf("UpdateTasks returned %d errors for %d rows", len(errs), len(us))
	}
	for i, w := range want {
		checkErr(t, fmt.Sprintf("row %d (%s)", i, us[i].Task.ID), errs[i], w)
	}
	for i := range runs {
		id := ts[i].ID
		got := mustGet(t, s, id)
		w, ok := final[id]
		if !ok {
			if got.Status != core.StatusQueued || got.Fence != 0 || got.Worker != "" {
				t.Fatalf("fenced run %s was written: %+v", id, got)
			}
			continue
		}
		if got.Status != w.Status || got.Fence != w.Fence || got.Worker != w.Worker {
			t.Fatalf("run %s: got %s/%d/%s, want %s/%d/%s", id, got.Status, got.Fence, got.Worker, w.Status, w.Fence, w.Worker)
		}
	}
}

// BenchUpdateTasks measures UpdateTasks in batches of size: each op is one
// run's state change (ns/op is per row), each batch one transaction.
func BenchUpdateTasks(b *testing.B, s store.Store, size int) {
	u := mustUserB(b, s)
	ts := make([]*core.Task, size)
	for i := range ts {
		ts[i] = &core.Task{ID: fmt.Sprintf("b%05d", i), UserID: u.ID, Command: []string{"true"}}
	}
	for i, err := range s.CreateTasks(b.Context(), ts) {
		if err != nil {
			b.Fatalf("create %d: %v", i, err)
		}
	}
	exp := make([]store.Expect, size)
	for i := range exp {
		exp[i] = store.Expect{Status: core.StatusQueued}
	}
	us := make([]store.Update, size)
	b.ResetTimer()
	for n := 0; n < b.N; n += size {
		for i, t := range ts {
			t.Fence = exp[i].Fence + 1
			t.Status = core.StatusRunning
			if exp[i].Status == core.StatusRunning {
				t.Status = core.StatusDispatched
			}
			t.Worker = "w1"
			us[i] = store.Update{Task: t, Expect: exp[i]}
		}
		for i, err := range s.UpdateTasks(b.Context(), us) {
			if err != nil {
				b.Fatalf("row %d: %v", i, err)
			}
			exp[i] = store.Expect{Fence: ts[i].Fence, Status: ts[i].Status}
		}
	}
}

func mustUserB(b *testing.B, s store.Store) core.User {
	u := core.User{Username: "bench", PasswordHash: "h"}
	if err := s.CreateUser(b.Context(), &u); err != nil {
		b.Fatal(err)
	}
	return u
}
