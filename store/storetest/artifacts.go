package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

func sum(c byte) string { return strings.Repeat(string(c), 64) }

func testArtifacts(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	mustTask(t, s, u, "r1", 0, at(0))
	mustTask(t, s, u, "r2", 0, at(1))
	row := func(attempt int, path string, size int64, c byte, mod time.Duration) core.Artifact {
		return core.Artifact{TaskID: "r1", Attempt: attempt, Path: path, Size: size, SHA256: sum(c), ModifiedAt: at(mod)}
	}
	put := func(a core.Artifact) {
		t.Helper()
		if err := s.PutArtifact(ctx, a); err != nil {
			t.Fatalf("PutArtifact(%s@%d): %v", a.Path, a.Attempt, err)
		}
	}
	// Nothing yet: empty, not nil, for a known and an unknown run.
	for _, id := range []string{"r1", "nope"} {
		if got, err := s.Artifacts(ctx, id, 0); err != nil || got == nil || len(got) != 0 {
			t.Fatalf("Artifacts(%s) before any: %v, %v", id, got, err)
		}
	}
	put(row(1, "checkpoint.json", 10, 'a', 1))
	put(row(1, "tb/events.out.tfevents.1", 20, 'b', 2))
	put(row(2, "checkpoint.json", 30, 'c', 3))
	put(row(2, "z/new", 0, 'd', 4))
	// Another run's rows are its own.
	if err := s.PutArtifact(ctx, core.Artifact{TaskID: "r2", Attempt: 1, Path: "checkpoint.json", Size: 1, SHA256: sum('e'), ModifiedAt: at(5)}); err != nil {
		t.Fatalf("PutArtifact(r2): %v", err)
	}
	check := func(what string, got []core.Artifact, err error, want ...core.Artifact) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for i := range got {
			got[i].ModifiedAt = got[i].ModifiedAt.Round(0)
			if got[i].ModifiedAt.Location() != time.UTC {
				t.Fatalf("%s: modifiedAt %v is not UTC", what, got[i].ModifiedAt)
			}
		}
		if want == nil {
			want = []core.Artifact{}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\ngot  %+v\nwant %+v", what, got, want)
		}
	}
	got, err := s.Artifacts(ctx, "r1", 0)
	check("newest of each path", got, err, row(2, "checkpoint.json", 30, 'c', 3), row(1, "tb/events.out.tfevents.1", 20, 'b', 2), row(2, "z/new", 0, 'd', 4))
	got, err = s.Artifacts(ctx, "r1", 1)
	check("attempt 1", got, err, row(1, "checkpoint.json", 10, 'a', 1), row(1, "tb/events.out.tfevents.1", 20, 'b', 2))
	got, err = s.Artifacts(ctx, "r1", 3)
	check("an attempt without files", got, err)

	// A new version of a path in the same attempt replaces the row.
	put(row(2, "checkpoint.json", 31, 'f', 6))
	one, err := s.Artifact(ctx, "r1", "checkpoint.json", 0)
	check("Artifact newest", []core.Artifact{one}, err, row(2, "checkpoint.json", 31, 'f', 6))
	one, err = s.Artifact(ctx, "r1", "checkpoint.json", 1)
	check("Artifact of attempt 1", []core.Artifact{one}, err, row(1, "checkpoint.json", 10, 'a', 1))
	for _, c := range []struct {
		path    string
		attempt int
	}{{"nope", 0}, {"checkpoint.json", 7}, {"z/new", 1}, {"tb", 0}} {
		if _, err := s.Artifact(ctx, "r1", c.path, c.attempt); !errors.Is(err, core.ErrNotFound) {
			t.Fatalf("Artifact(%s@%d): %v, want ErrNotFound", c.path, c.attempt, err)
		}
	}
	files, bytes, err := s.ArtifactUsage(ctx, "r1")
	if err != nil || files != 4 || bytes != 10+20+31+0 {
		t.Fatalf("ArtifactUsage(r1) = %d files, %d bytes, %v; want 4, 61", files, bytes, err)
	}
	if files, bytes, err := s.ArtifactUsage(ctx, "nope"); err != nil || files != 0 || bytes != 0 {
		t.Fatalf("ArtifactUsage(nope) = %d, %d, %v", files, bytes, err)
	}
	// A user's bytes are their runs' rows, every attempt's; 0 sums everyone's.
	bob := mustUser(t, s, "bob")
	mustTask(t, s, bob, "b1", 0, at(2))
	if err := s.PutArtifact(ctx, core.Artifact{TaskID: "b1", Attempt: 1, Path: "w.pt", Size: 1000, SHA256: sum('9'), ModifiedAt: at(7)}); err != nil {
		t.Fatalf("PutArtifact(b1): %v", err)
	}
	for _, c := range []struct {
		user int64
		want int64
	}{{u.ID, 61 + 1}, {bob.ID, 1000}, {0, 61 + 1 + 1000}, {bob.ID + 1000, 0}} {
		if got, err := s.ArtifactBytes(ctx, c.user); err != nil || got != c.want {
			t.Fatalf("ArtifactBytes(%d) = %d, %v; want %d", c.user, got, err, c.want)
		}
	}

	// Refused rows write nothing.
	bad := []core.Artifact{
		{TaskID: "nope", Attempt: 1, Path: "x", SHA256: sum('a'), ModifiedAt: at(0)},
		{TaskID: "r1", Attempt: 1, Path: "../x", SHA256: sum('a'), ModifiedAt: at(0)},
		{TaskID: "r1", Attempt: 1, Path: "/etc/passwd", SHA256: sum('a'), ModifiedAt: at(0)},
		{TaskID: "r1", Attempt: 1, Path: "a\x00b", SHA256: sum('a'), ModifiedAt: at(0)},
		{TaskID: "r1", Attempt: 1, Path: strings.Repeat("a", 1025), SHA256: sum('a'), ModifiedAt: at(0)},
		{TaskID: "r1", Attempt: 1, Path: "x", SHA256: "ABC", ModifiedAt: at(0)},
		{TaskID: "r1", Attempt: 0, Path: "x", SHA256: sum('a'), ModifiedAt: at(0)},
		{TaskID: "r1", Attempt: 1, Path: "x", Size: -1, SHA256: sum('a'), ModifiedAt: at(0)},
	}
	for _, a := range bad {
		if err := s.PutArtifact(ctx, a); err == nil {
			t.Fatalf("PutArtifact(%+v) succeeded", a)
		}
	}
	if err := s.PutArtifact(ctx, bad[0]); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("PutArtifact of an unknown run: %v, want ErrNotFound", err)
	}
	if files, _, _ := s.ArtifactUsage(ctx, "r1"); files != 4 {
		t.Fatalf("refused rows were written: %d files", files)
	}
	// A path as long as allowed, with any bytes but the refused ones.
	long := strings.Repeat("é", 512) // 1024 bytes
	put(row(1, long, 1, 'a', 0))
	if one, err := s.Artifact(ctx, "r1", long, 1); err != nil || one.Path != long {
		t.Fatalf("a 1024-byte path: %v", err)
	}
}

func testWarnings(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	tk := mustTask(t, s, u, "r1", 0, at(0))
	if tk.Warnings == nil || len(tk.Warnings) != 0 {
		t.Fatalf("a new run's warnings: %#v, want empty", tk.Warnings)
	}
	if got := mustGet(t, s, "r1").Warnings; got == nil || len(got) != 0 {
		t.Fatalf("a new run's warnings as read: %#v", got)
	}
	w1 := core.Warning{Code: core.WarnArtifactLimit, Message: "out/big (5 GiB) is over ARTIFACT_MAX_FILE_BYTES", At: at(time.Second).In(time.FixedZone("x", 3600))}
	w2 := core.Warning{Code: core.WarnArtifactError, Message: strings.Repeat("ü", 400), At: at(2 * time.Second)}
	for _, w := range []core.Warning{w1, w2} {
		if err := s.AddWarning(ctx, "r1", w); err != nil {
			t.Fatalf("AddWarning: %v", err)
		}
	}
	// An update of the run's state neither drops nor needs them.
	mustMove(t, s, "r1", core.StatusRunning, 3)
	got := mustGet(t, s, "r1").Warnings
	if len(got) != 2 || got[0].Code != w1.Code || got[0].Message != w1.Message || !got[0].At.Equal(w1.At) || got[0].At.Location() != time.UTC {
		t.Fatalf("warnings after an update: %+v", got)
	}
	if got[1].Code != w2.Code || len(got[1].Message) > core.MaxWarningBytes || !strings.HasPrefix(w2.Message, got[1].Message) || len(got[1].Message) < core.MaxWarningBytes-1 {
		t.Fatalf("a long message: %d bytes %q, want cut at a character to at most %d", len(got[1].Message), got[1].Message, core.MaxWarningBytes)
	}
	if err := s.AddWarning(ctx, "nope", w1); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("AddWarning of an unknown run: %v, want ErrNotFound", err)
	}
	if err := s.AddWarning(ctx, "r1", core.Warning{Message: "no code", At: at(0)}); err == nil {
		t.Fatal("AddWarning without a code succeeded")
	}
	// Concurrent appends all land, up to the cap, then are dropped quietly.
	var wg sync.WaitGroup
	errs := make(chan error, core.MaxWarnings)
	for i := range core.MaxWarnings {
		wg.Go(func() {
			if err := s.AddWarning(ctx, "r1", core.Warning{Code: "c", Message: fmt.Sprint(i), At: at(time.Duration(i))}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent AddWarning: %v", err)
	}
	if got := mustGet(t, s, "r1").Warnings; len(got) != core.MaxWarnings {
		t.Fatalf("%d warnings after %d adds, want the cap %d", len(got), 2+core.MaxWarnings, core.MaxWarnings)
	}
}

func testResumeFrom(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	mustTask(t, s, u, "r1", 0, at(0))
	tk := core.Task{ID: "r2", Name: "resumed", UserID: u.ID, CreatedAt: at(1), ResumeFrom: "r1"}
	if err := s.CreateTask(ctx, &tk); err != nil {
		t.Fatalf("CreateTask with resumeFrom: %v", err)
	}
	if got := mustGet(t, s, "r2"); got.ResumeFrom != "r1" {
		t.Fatalf("resumeFrom read back: %q", got.ResumeFrom)
	}
	if got := mustGet(t, s, "r1"); got.ResumeFrom != "" {
		t.Fatalf("resumeFrom of a fresh run: %q", got.ResumeFrom)
	}
	bad := core.Task{ID: "r3", UserID: u.ID, ResumeFrom: "../r1"}
	if err := s.CreateTask(ctx, &bad); err == nil {
		t.Fatal("CreateTask with an invalid resumeFrom succeeded")
	}
}
