// Package storetest is the conformance suite every store.Store backend must
// pass. It uses the store through its interface only, so SQLite and MySQL
// are held to the same contract. It never sleeps: times that order rows are
// set explicitly.
//
// Contract points this suite pins down beyond store.go's comments:
//   - Command, Tags, GPUIndices and Env come back empty and non-nil when they
//     were stored nil or empty (so API JSON shows [] and {}, never null).
//   - Params: nil, empty and JSON null come back nil; other JSON comes back
//     compacted.
//   - Times come back in UTC with nanoseconds intact; a non-nil zero
//     StartedAt/FinishedAt comes back nil.
//   - CreateTask forces status QUEUED and fence 0, fills an empty ID, needs
//     an existing UserID (core.ErrNotFound) and sets User to its username.
//   - ListTasks clamps Limit to 1..500 (default 50) rather than failing.
//   - QueuedTasks with limit ≤ 0 returns up to 50.
//   - CountByStatus has a key, zero or not, for every known status.
//   - AppendMetrics: a repeated (name, step) keeps the last value; NaN/±Inf
//     points are dropped; an unknown run is core.ErrNotFound, as for Metrics.
package storetest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// Run runs the whole suite. open must return a new, empty store for each
// call and close it through t.Cleanup.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		f    func(t *testing.T, s store.Store)
	}{
		{"Users", testUsers},
		{"FirstUserRace", testFirstUserRace},
		{"TokenVersion", testTokenVersion},
		{"UserAdmin", testUserAdmin},
		{"LastAdmin", testLastAdmin},
		{"DeletedUserRuns", testDeletedUserRuns},
		{"UserSummaries", testUserSummaries},
		{"Notify", testNotify},
		{"TaskRoundTrip", testTaskRoundTrip},
		{"TaskDefaults", testTaskDefaults},
		{"CreateTaskErrors", testCreateTaskErrors},
		{"FencedUpdate", testFencedUpdate},
		{"Transitions", testTransitions},
		{"ConcurrentFencedUpdate", testConcurrentFencedUpdate},
		{"CreateTasksMixed", testCreateTasksMixed},
		{"UpdateTasksMixed", testUpdateTasksMixed},
		{"ConcurrentUpdateTasks", testConcurrentUpdateTasks},
		{"ConcurrentCreateTasks", testConcurrentCreateTasks},
		{"Batcher", testBatcher},
		{"QueueOrder", testQueueOrder},
		{"QueueFair", testQueueFair},
		{"ActiveAndCounts", testActiveAndCounts},
		{"MaxFence", testMaxFence},
		{"CancelRequests", testCancelRequests},
		{"SetFinalReward", testSetFinalReward},
		{"EditRecord", testEditRecord},
		{"ListPagination", testListPagination},
		{"ListStableUnderInserts", testListStableUnderInserts},
		{"ListLimits", testListLimits},
		{"BadCursor", testBadCursor},
		{"Metrics", testMetrics},
		{"CodeDiffs", testCodeDiffs},
		{"Artifacts", testArtifacts},
		{"Warnings", testWarnings},
		{"ResumeFrom", testResumeFrom},
		{"PingKind", testPingKind},
		{"ListFind", testListFind},
		{"SweepCreate", testSweepCreate},
		{"SweepAllOrNothing", testSweepAllOrNothing},
		{"SweepRetry", testSweepRetry},
		{"SweepList", testSweepList},
		{"SweepMetrics", testSweepMetrics},
		{"PackSeries", testPackSeries},
		{"SweepLimits", testSweepLimits},
		{"SweepVersion", testSweepVersion},
		{"SweepGrow", testSweepGrow},
		{"SweepDecisions", testSweepDecisions},
		{"SetPriority", testSetPriority},
		{"Usage", testUsage},
		{"Accruing", testAccruing},
		{"Quotas", testQuotas},
		{"PreemptionFields", testPreemptionFields},
		{"Dependencies", testDependencies},
		{"Pipelines", testPipelines},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, open(t)) })
	}
}

// base is the creation time tests count from; it has nanoseconds so a
// backend that rounds them fails.
var base = time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

func mustUser(t *testing.T, s store.Store, name string) core.User {
	t.Helper()
	u := core.User{Username: name, PasswordHash: "hash-" + name}
	if err := s.CreateUser(t.Context(), &u); err != nil {
		t.Fatalf("CreateUser(%s): %v", name, err)
	}
	return u
}

// mustTask creates a QUEUED run of u with the given id (empty: generated),
// priority and creation time.
func mustTask(t *testing.T, s store.Store, u core.User, id string, prio int, created time.Time) core.Task {
	t.Helper()
	tk := core.Task{ID: id, Name: "run " + id, UserID: u.ID, Priority: prio, CreatedAt: created,
		Command: []string{"python3", "train.py"}, MaxRetries: 1}
	if err := s.CreateTask(t.Context(), &tk); err != nil {
		t.Fatalf("CreateTask(%s): %v", id, err)
	}
	return tk
}

func mustGet(t *testing.T, s store.Store, id string) core.Task {
	t.Helper()
	tk, err := s.Task(t.Context(), id)
	if err != nil {
		t.Fatalf("Task(%s): %v", id, err)
	}
	return tk
}

// mustMove changes a run's status and fence through a fenced update from its
// current state.
func mustMove(t *testing.T, s store.Store, id string, st core.Status, fence uint64) core.Task {
	t.Helper()
	tk := mustGet(t, s, id)
	exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
	tk.Status, tk.Fence = st, fence
	if err := s.UpdateTask(t.Context(), &tk, exp); err != nil {
		t.Fatalf("UpdateTask(%s → %s/%d): %v", id, st, fence, err)
	}
	return tk
}

// canon returns tk with its times in UTC and without monotonic readings, so
// reflect.DeepEqual compares instants.
func canon(tk core.Task) core.Task {
	c := func(p *time.Time) *time.Time {
		if p == nil {
			return nil
		}
		v := p.Round(0).UTC()
		return &v
	}
	tk.CreatedAt, tk.UpdatedAt = tk.CreatedAt.Round(0).UTC(), tk.UpdatedAt.Round(0).UTC()
	tk.StartedAt, tk.FinishedAt = c(tk.StartedAt), c(tk.FinishedAt)
	if tk.Warnings == nil {
		tk.Warnings = []core.Warning{} // as every read gives them; tests write none
	}
	if len(tk.History) > 0 {
		h := slices.Clone(tk.History)
		for i := range h {
			h[i].At = h[i].At.Round(0).UTC()
		}
		tk.History = h
	}
	return tk
}

func checkTask(t *testing.T, what string, got, want core.Task) {
	t.Helper()
	if g, w := canon(got), canon(want); !reflect.DeepEqual(g, w) {
		gj, _ := json.MarshalIndent(g, "", " ")
		wj, _ := json.MarshalIndent(w, "", " ")
		t.Fatalf("%s:\ngot  %s\nwant %s", what, gj, wj)
	}
}

func ids(ts []core.Task) []string {
	out := make([]string, len(ts))
	for i, tk := range ts {
		out[i] = tk.ID
	}
	return out
}

func checkIDs(t *testing.T, what string, got []core.Task, want []string) {
	t.Helper()
	if g := ids(got); fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("%s: got ids %v, want %v", what, g, want)
	}
}

func ptr[T any](v T) *T { return &v }
