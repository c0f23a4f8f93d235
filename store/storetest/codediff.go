package storetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// testCodeDiffs: a diff is stored once by content, under its sha256; runs
// name it and read back HasDiff; every byte survives, a NUL and invalid
// UTF-8 included; unknown or malformed ids are core.ErrNotFound; an empty
// or oversized diff is refused.
func testCodeDiffs(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	diff := []byte("diff --git a/train.py b/train.py\n--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-lr = 1e-3\n+lr = 3e-4 # \x00 \xff\xfe ünï\n")
	id, err := s.PutCodeDiff(ctx, diff)
	if err != nil {
		t.Fatalf("PutCodeDiff: %v", err)
	}
	sum := sha256.Sum256(diff)
	if id != hex.EncodeToString(sum[:]) {
		t.Fatalf("PutCodeDiff id %q, want the sha256 of the bytes", id)
	}
	again, err := s.PutCodeDiff(ctx, append([]byte(nil), diff...))
	if err != nil || again != id {
		t.Fatalf("PutCodeDiff of the same bytes again: %q, %v; want %q, nil", again, err, id)
	}
	got, err := s.CodeDiff(ctx, id)
	if err != nil || !bytes.Equal(got, diff) {
		t.Fatalf("CodeDiff: %q, %v; want the bytes stored", got, err)
	}
	// The largest diff allowed round-trips; one byte more is refused.
	big := bytes.Repeat([]byte("+x\n"), core.MaxCodeDiffBytes/3+1)[:core.MaxCodeDiffBytes]
	bigID, err := s.PutCodeDiff(ctx, big)
	if err != nil {
		t.Fatalf("PutCodeDiff of %d bytes: %v", len(big), err)
	}
	if got, err := s.CodeDiff(ctx, bigID); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("CodeDiff of the largest diff: %d bytes, %v", len(got), err)
	}
	if _, err := s.PutCodeDiff(ctx, append(big, '\n')); err == nil {
		t.Fatal("PutCodeDiff of a diff over MaxCodeDiffBytes succeeded")
	}
	if _, err := s.PutCodeDiff(ctx, nil); err == nil {
		t.Fatal("PutCodeDiff of an empty diff succeeded")
	}
	for _, bad := range []string{"", "nope", id[:63], id + "0", "../../etc/passwd", "zz" + id[2:],
		hex.EncodeToString(make([]byte, 32))} {
		if _, err := s.CodeDiff(ctx, bad); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("CodeDiff(%q): %v, want ErrNotFound", bad, err)
		}
	}

	// Two runs share the diff; one without a diff says so.
	for _, rid := range []string{"r-diff1", "r-diff2"} {
		tk := core.Task{ID: rid, UserID: u.ID, Code: core.CodeInfo{GitCommit: "abc", GitDirty: true, DiffID: id}}
		if err := s.CreateTask(ctx, &tk); err != nil {
			t.Fatalf("CreateTask(%s): %v", rid, err)
		}
		if !tk.Code.HasDiff {
			t.Errorf("CreateTask(%s) returned HasDiff false for a run naming a diff", rid)
		}
		if r := mustGet(t, s, rid); !r.Code.HasDiff || r.Code.DiffID != id {
			t.Errorf("run %s read back with code %+v, want HasDiff and DiffID %s", rid, r.Code, id)
		}
	}
	tk := core.Task{ID: "r-nodiff", UserID: u.ID, Code: core.CodeInfo{GitCommit: "abc", GitDirty: true,
		DiffOmitted: "the diff is 3.0 MiB, over the 2 MiB limit"}}
	if err := s.CreateTask(ctx, &tk); err != nil {
		t.Fatalf("CreateTask(r-nodiff): %v", err)
	}
	if r := mustGet(t, s, "r-nodiff"); r.Code.HasDiff || r.Code.DiffID != "" || r.Code.DiffOmitted != tk.Code.DiffOmitted {
		t.Errorf("run without a diff read back with code %+v", r.Code)
	}
	// Listing carries the code too (one query for every row).
	page, _, err := s.ListTasks(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page {
		if want := r.ID != "r-nodiff"; r.Code.HasDiff != want {
			t.Errorf("listed run %s: HasDiff %v, want %v", r.ID, r.Code.HasDiff, want)
		}
	}
}
