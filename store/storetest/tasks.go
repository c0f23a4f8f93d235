package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// testTaskRoundTrip: every field of a run survives create, read, update, read.
func testTaskRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	in := core.Task{
		ID: "r-roundtrip_1", Name: "ppo cartpole", Project: "cartpole", User: "ignored", UserID: u.ID,
		Status: core.StatusRunning, Attempt: 2, MaxRetries: 3,
		Command: []string{"python3", "train.py", "--lr", "3e-4", "with space", "ünïcode"},
		Params:  json.RawMessage(`{"lr":0.0003,"layers":[64,64],"name":"x"}`),
		GPUs:    2, Priority: -7,
		Env:     map[string]string{"SEED": "42", "EMPTY": ""},
		Tags:    []string{"baseline", "v2"},
		Workdir: "/data/runs", Worker: "w-before", GPUIndices: []int{3, 1},
		TraceID: "trace-abc", ExitCode: ptr(-1), Error: "old error", FinalReward: ptr(1.5),
		Code: core.CodeInfo{GitCommit: "0123456789abcdef", GitDirty: true, GitRemote: "https://example.com/lab/rl.git",
			DiffID: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", DiffOmitted: "a note",
			Tree: "4f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Subdir: "exp/a"},
		TimeoutSeconds: 3600,
		CreatedAt:      at(0).In(time.FixedZone("CET", 3600)),
		StartedAt:      ptr(at(time.Second)), FinishedAt: ptr(at(2 * time.Second)),
		UpdatedAt: at(3 * time.Nanosecond), Fence: 99,
		CPUs: 2.5, MemoryMB: 16384, Private: true, Kind: core.KindInteractive,
		Reason: "lost", Usage: &core.Usage{CPUSeconds: 1.25, PeakMemoryMB: 900, GPUSeconds: 7},
		ErrorTail: "Traceback\nKeyError: 'x'", Note: "a ünïcode note", Baseline: true,
		GPUFraction: 0.25, GPUMemoryMB: 20000, GPUType: []string{"A100", "H100"},
		Constraints: map[string]string{"pool": "a100", "!pool": "interactive"},
		Python:      &core.PythonEnv{Requirements: "exp/requirements.txt"},
		Nodes:       3,
		Image:       "registry.lab:5000/rl/base:1.2",
	}
	want := in
	want.User, want.Status, want.Fence = "alice", core.StatusQueued, 0 // CreateTask forces these
	want.Code.HasDiff = true                                           // a run naming a diff has one
	tk := in
	if err := s.CreateTask(ctx, &tk); err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	checkTask(t, "task as returned by CreateTask", tk, want)
	checkTask(t, "task read after CreateTask", mustGet(t, s, in.ID), want)

	// Every mutable field changes, including to NULL and back from it.
	upd := mustGet(t, s, in.ID)
	upd.Status, upd.Attempt, upd.Fence = core.StatusSucceeded, 3, 12
	upd.Worker, upd.GPUIndices, upd.Error = "w-after", []int{0}, ""
	upd.ExitCode, upd.FinalReward = ptr(0), nil
	upd.StartedAt, upd.FinishedAt = ptr(at(time.Hour+time.Nanosecond)), nil
	upd.CPUs, upd.MemoryMB, upd.Reason, upd.Usage, upd.ErrorTail = 4, 2048, "out_of_memory", nil, "Killed"
	// The owner's record (Private, Kind, Note, Baseline) is not a fenced
	// update's to change.
	upd.Private, upd.Kind, upd.Note, upd.Baseline = false, core.KindBatch, "changed", false
	// The history is stored whole; an entry without a time is as of the
	// write (core.Task.Dispatch and Lose give none).
	upd.History = []core.HistoryEntry{{Status: "DISPATCHED", Attempt: 3, Worker: "w-after"},
		{Status: "SUCCEEDED", Attempt: 3, At: at(time.Hour + 2*time.Nanosecond), Reason: "ünïcode reason"}}
	if err := s.UpdateTask(ctx, &upd, store.Expect{Fence: 0, Status: core.StatusQueued}); err != nil {
		t.Fatalf("UpdateTask: %v", err)
	}
	if !upd.UpdatedAt.After(in.UpdatedAt) {
		t.Fatalf("UpdateTask left UpdatedAt at %v, want it set to now", upd.UpdatedAt)
	}
	want.Status, want.Attempt, want.Fence = core.StatusSucceeded, 3, 12
	want.Worker, want.GPUIndices, want.Error = "w-after", []int{0}, ""
	want.ExitCode, want.FinalReward = ptr(0), nil
	want.StartedAt, want.FinishedAt = ptr(at(time.Hour+time.Nanosecond)), nil
	want.CPUs, want.MemoryMB, want.Reason, want.Usage, want.ErrorTail = 4, 2048, "out_of_memory", nil, "Killed"
	want.UpdatedAt = upd.UpdatedAt
	want.History = []core.HistoryEntry{{Status: "DISPATCHED", Attempt: 3, At: upd.UpdatedAt, Worker: "w-after"},
		{Status: "SUCCEEDED", Attempt: 3, At: at(time.Hour + 2*time.Nanosecond), Reason: "ünïcode reason"}}
	if g, w := canon(upd).History, canon(want).History; !reflect.DeepEqual(g, w) {
		t.Fatalf("the history UpdateTask returned: %+v, want %+v", g, w)
	}
	checkTask(t, "task read after UpdateTask", mustGet(t, s, in.ID), want)

	if _, err := s.Task(ctx, "r-missing"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Task(missing): got %v, want ErrNotFound", err)
	}
}

// testTaskDefaults: what CreateTask fills in, and how empty values come back.
func testTaskDefaults(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	f := func(params json.RawMessage, wantParams json.RawMessage) {
		t.Helper()
		tk := core.Task{UserID: u.ID, Params: params}
		if err := s.CreateTask(t.Context(), &tk); err != nil {
			t.Fatalf("CreateTask(params %q): %v", params, err)
		}
		if !core.ValidTaskID(tk.ID) || tk.CreatedAt.IsZero() || tk.UpdatedAt.IsZero() {
			t.Fatalf("CreateTask left id %q createdAt %v updatedAt %v", tk.ID, tk.CreatedAt, tk.UpdatedAt)
		}
		want := core.Task{
			ID: tk.ID, User: "alice", UserID: u.ID, Status: core.StatusQueued, Kind: core.KindBatch,
			Command: []string{}, Env: map[string]string{}, Tags: []string{}, GPUIndices: []int{},
			Params: wantParams, CreatedAt: tk.CreatedAt, UpdatedAt: tk.UpdatedAt,
		}
		checkTask(t, "defaults returned by CreateTask", tk, want)
		checkTask(t, "defaults read back", mustGet(t, s, tk.ID), want)
	}
	f(nil, nil)
	f(json.RawMessage(``), nil)
	f(json.RawMessage(`null`), nil)
	f(json.RawMessage(" { \"a\" : [1, 2] }\n"), json.RawMessage(`{"a":[1,2]}`))
	f(json.RawMessage(`{}`), json.RawMessage(`{}`))

	// Empty, non-nil values come back the same as nil ones.
	tk := core.Task{UserID: u.ID, Command: []string{}, Env: map[string]string{}, Tags: []string{},
		GPUIndices: []int{}, StartedAt: &time.Time{}}
	if err := s.CreateTask(t.Context(), &tk); err != nil {
		t.Fatalf("CreateTask(empty values): %v", err)
	}
	got := mustGet(t, s, tk.ID)
	if got.Command == nil || got.Env == nil || got.Tags == nil || got.GPUIndices == nil ||
		got.StartedAt != nil {
		t.Fatalf("empty values read back as %+v, want empty non-nil lists and maps, nil StartedAt", got)
	}
}

func testCreateTaskErrors(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	mustTask(t, s, u, "r-dup", 0, at(0))
	f := func(tk core.Task, want error) {
		t.Helper()
		err := s.CreateTask(t.Context(), &tk)
		if want == nil && err == nil || want != nil && !errors.Is(err, want) {
			t.Fatalf("CreateTask(%s, user %d): got %v, want %v", tk.ID, tk.UserID, err, want)
		}
	}
	f(core.Task{ID: "r-dup", UserID: u.ID}, core.ErrConflict)
	f(core.Task{ID: "r-nouser", UserID: u.ID + 1000}, core.ErrNotFound)
	f(core.Task{ID: "bad/id", UserID: u.ID}, nil)                                  // any error
	f(core.Task{ID: "r-badjson", UserID: u.ID, Params: json.RawMessage(`{`)}, nil) // any error
	f(core.Task{ID: "r-badkind", UserID: u.ID, Kind: "daemon"}, nil)               // any error
	if _, err := s.Task(t.Context(), "r-nouser"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("a failed CreateTask left a row: %v", err)
	}
}

func testSetFinalReward(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	mustTask(t, s, u, "r1", 0, at(0))
	before := mustMove(t, s, "r1", core.StatusRunning, 3)
	if err := s.SetFinalReward(t.Context(), "r1", 187.25); err != nil {
		t.Fatalf("SetFinalReward: %v", err)
	}
	got := mustGet(t, s, "r1")
	if got.FinalReward == nil || *got.FinalReward != 187.25 {
		t.Fatalf("FinalReward: got %v, want 187.25", got.FinalReward)
	}
	if got.Status != before.Status || got.Fence != before.Fence {
		t.Fatalf("SetFinalReward changed state to %s/%d", got.Status, got.Fence)
	}
	if err := s.SetFinalReward(t.Context(), "r-missing", 1); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("SetFinalReward(missing): got %v, want ErrNotFound", err)
	}
}

func testMaxFence(t *testing.T, s store.Store) {
	f := func(want uint64) {
		t.Helper()
		got, err := s.MaxFence(t.Context())
		if err != nil || got != want {
			t.Fatalf("MaxFence: got %d, %v; want %d", got, err, want)
		}
	}
	f(0)
	u := mustUser(t, s, "alice")
	mustTask(t, s, u, "r1", 0, at(0))
	mustTask(t, s, u, "r2", 0, at(1))
	f(0)
	mustMove(t, s, "r1", core.StatusDispatched, 9)
	mustMove(t, s, "r2", core.StatusDispatched, 3)
	f(9)
	mustMove(t, s, "r1", core.StatusLost, 9)
	mustMove(t, s, "r1", core.StatusQueued, 0) // requeued: fence back to 0
	f(3)
}

func testActiveAndCounts(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	for i, id := range []string{"r0", "r1", "r2", "r3", "r4"} {
		mustTask(t, s, u, id, 0, at(time.Duration(i)))
	}
	mustMove(t, s, "r3", core.StatusDispatched, 1)
	mustMove(t, s, "r1", core.StatusRunning, 2)
	mustMove(t, s, "r2", core.StatusSucceeded, 3)
	act, err := s.ActiveTasks(t.Context())
	if err != nil {
		t.Fatalf("ActiveTasks: %v", err)
	}
	checkIDs(t, "ActiveTasks", act, []string{"r1", "r3"})

	counts, err := s.CountByStatus(t.Context())
	if err != nil {
		t.Fatalf("CountByStatus: %v", err)
	}
	want := map[core.Status]int{
		core.StatusQueued: 2, core.StatusDispatched: 1, core.StatusRunning: 1, core.StatusSucceeded: 1,
		core.StatusFailed: 0, core.StatusCancelled: 0, core.StatusTimeout: 0, core.StatusLost: 0,
	}
	if len(counts) != len(want) {
		t.Fatalf("CountByStatus: got %v, want %v", counts, want)
	}
	for st, n := range want {
		if c, ok := counts[st]; !ok || c != n {
			t.Fatalf("CountByStatus: got %v, want %v", counts, want)
		}
	}

	// QueuedCount: a user's QUEUED runs, those waiting for a dependency
	// too (each backend counts them through its queue's indexes), no
	// other user's.
	kid := core.Task{ID: "w0", Name: "waits", UserID: u.ID, CreatedAt: at(9),
		After: []core.Dep{{Run: "r0", When: core.WhenEnded}}}
	if err := s.CreateTask(t.Context(), &kid); err != nil || !kid.Waiting {
		t.Fatalf("CreateTask(waiting): %v, waiting %v", err, kid.Waiting)
	}
	bob := mustUser(t, s, "bob")
	mustTask(t, s, bob, "b0", 0, at(10))
	for _, c := range []struct {
		who  core.User
		want int
	}{{u, 3}, {bob, 1}} {
		if n, err := s.QueuedCount(t.Context(), c.who.ID); err != nil || n != c.want {
			t.Fatalf("QueuedCount(%s) = %d, %v; want %d", c.who.Username, n, err, c.want)
		}
	}
}

func testQueueOrder(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	for _, c := range []struct {
		id      string
		prio    int
		created time.Duration
	}{
		{"a", 0, 1}, {"b", 5, 3}, {"c2", 5, 2}, {"c1", 5, 2}, {"d", 0, 0},
		{"e", 9, 5}, {"g", -1, 0},
	} {
		mustTask(t, s, u, c.id, c.prio, at(c.created))
	}
	mustMove(t, s, "e", core.StatusDispatched, 1) // no longer queued
	f := func(limit int, want ...string) {
		t.Helper()
		got, err := s.QueuedTasks(t.Context(), limit)
		if err != nil {
			t.Fatalf("QueuedTasks(%d): %v", limit, err)
		}
		checkIDs(t, "QueuedTasks", got, want)
	}
	f(100, "c1", "c2", "b", "d", "a", "g")
	f(0, "c1", "c2", "b", "d", "a", "g")
	f(2, "c1", "c2")
}

// testQueueFair (issue 25): a window shorter than the queue gives each
// group of one owner and one sweep its share, so older runs that cannot
// start never hide everyone else's; it is still in queue order, a group's
// unused share goes to the others, and priority still comes first.
func testQueueFair(t *testing.T, s store.Store) {
	alice, bob, carol := mustUser(t, s, "alice"), mustUser(t, s, "bob"), mustUser(t, s, "carol")
	mk := func(u core.User, id, sweep string, prio int, created time.Duration) {
		t.Helper()
		tk := core.Task{ID: id, UserID: u.ID, SweepID: sweep, Priority: prio, CreatedAt: at(created), Command: []string{"x"}}
		if err := s.CreateTask(t.Context(), &tk); err != nil {
			t.Fatalf("CreateTask(%s): %v", id, err)
		}
	}
	for i := range 6 { // alice's old runs, half of them a sweep's
		mk(alice, fmt.Sprintf("a%d", i), "", 0, time.Duration(i))
		mk(alice, fmt.Sprintf("s%d", i), "s-big", 0, time.Duration(i)+time.Millisecond)
	}
	mk(bob, "b0", "", 0, time.Second)
	mk(carol, "c0", "", 0, 2*time.Second)
	mk(carol, "c1", "", 0, 3*time.Second)
	f := func(limit int, want ...string) {
		t.Helper()
		got, err := s.QueuedTasks(t.Context(), limit)
		if err != nil {
			t.Fatalf("QueuedTasks(%d): %v", limit, err)
		}
		checkIDs(t, fmt.Sprintf("QueuedTasks(%d)", limit), got, want)
	}
	f(4, "a0", "s0", "b0", "c0")
	f(8, "a0", "a1", "a2", "s0", "s1", "b0", "c0", "c1") // bob's unused share goes round again
	f(100, "a0", "a1", "a2", "a3", "a4", "a5", "s0", "s1", "s2", "s3", "s4", "s5", "b0", "c0", "c1")
	mk(carol, "c-urgent", "", 5, 4*time.Second)
	f(4, "c-urgent", "a0", "s0", "b0")
}
