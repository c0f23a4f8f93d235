package depctl_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/depctl"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/sqlite"
)

// relay is the store's sink: it hands every committed change to the
// controller, as the master's sinks do.
type relay struct {
	mu sync.Mutex
	c  *depctl.Controller
}

func (r *relay) TaskChanged(t core.Task) {
	r.mu.Lock()
	c := r.c
	r.mu.Unlock()
	if c != nil {
		c.TaskChanged(t)
	}
}
func (r *relay) WorkerChanged(core.WorkerInfo) {}

type rig struct {
	t        *testing.T
	raw      *sqlite.Store
	st       store.Store
	user     core.User
	mu       sync.Mutex
	released map[string]time.Time
	relay    *relay
	stop     context.CancelFunc
	done     chan struct{}
}

func newRig(t *testing.T, path string) *rig {
	t.Helper()
	raw, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	r := &rig{t: t, raw: raw, released: map[string]time.Time{}, relay: &relay{}}
	r.st = store.Publishing(raw, r.relay)
	u, err := raw.UserByName(t.Context(), "alice")
	if err != nil {
		u = core.User{Username: "alice", PasswordHash: "x"}
		if err := raw.CreateUser(t.Context(), &u); err != nil {
			t.Fatal(err)
		}
	}
	r.user = u
	return r
}

// start starts a controller on the rig's store (interval: its safety net).
func (r *rig) start(interval time.Duration) {
	c := depctl.New(depctl.Config{Store: r.st, Interval: interval, Log: zerolog.Nop(),
		Released: func(t core.Task) {
			r.mu.Lock()
			r.released[t.ID] = time.Now()
			r.mu.Unlock()
		}})
	r.relay.mu.Lock()
	r.relay.c = c
	r.relay.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	r.stop, r.done = cancel, make(chan struct{})
	go func() { defer close(r.done); c.Run(ctx) }()
	r.t.Cleanup(r.halt)
}

func (r *rig) halt() {
	if r.stop != nil {
		r.stop()
		<-r.done
		r.stop = nil
	}
	r.relay.mu.Lock()
	r.relay.c = nil
	r.relay.mu.Unlock()
}

func (r *rig) run(id string, after ...core.Dep) {
	r.t.Helper()
	t := core.Task{ID: id, Name: id, UserID: r.user.ID, Command: []string{"true"}, After: after}
	if err := r.st.CreateTask(r.t.Context(), &t); err != nil {
		r.t.Fatal(err)
	}
}

// end moves run id from QUEUED to a final status through the published
// store, as the dispatcher does.
func (r *rig) end(id string, s core.Status) {
	r.t.Helper()
	ctx := r.t.Context()
	t, err := r.st.Task(ctx, id)
	if err != nil {
		r.t.Fatal(err)
	}
	exp := store.Expect{Fence: t.Fence, Status: t.Status}
	now := time.Now()
	if s == core.StatusCancelled {
		err = t.Cancel("test", now)
	} else {
		if err = t.Dispatch("w", nil, 7); err == nil {
			if err = r.st.UpdateTask(ctx, &t, exp); err != nil {
				r.t.Fatal(err)
			}
			exp = store.Expect{Fence: 7, Status: core.StatusDispatched}
			if err = t.Start(now); err == nil {
				if err = r.st.UpdateTask(ctx, &t, exp); err != nil {
					r.t.Fatal(err)
				}
				exp.Status = core.StatusRunning
				err = t.Finish(s, nil, "", now)
			}
		}
	}
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.st.UpdateTask(ctx, &t, exp); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) task(id string) core.Task {
	t, err := r.st.Task(r.t.Context(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	return t
}

func (r *rig) wantStatus(id string, s core.Status, waiting bool) core.Task {
	r.t.Helper()
	var t core.Task
	testutil.Eventually(r.t, 5*time.Second, func() (bool, string) {
		t = r.task(id)
		return t.Status == s && t.Waiting == waiting, "run " + id + " is " + string(t.Status)
	})
	return t
}

// releasedAt waits for the Released hook to hear id (the controller calls
// it after the store has the run queued) and says when it did.
func (r *rig) releasedAt(id string) time.Time {
	r.t.Helper()
	var at time.Time
	testutil.Eventually(r.t, 5*time.Second, func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		var ok bool
		at, ok = r.released[id]
		return ok, id + " released without the Released hook"
	})
	return at
}

func (r *rig) queued() []string {
	q, err := r.st.QueuedTasks(r.t.Context(), 100)
	if err != nil {
		r.t.Fatal(err)
	}
	var ids []string
	for _, t := range q {
		ids = append(ids, t.ID)
	}
	return ids
}

func dep(run, when string) core.Dep { return core.Dep{Run: run, When: when} }

// An hour of safety net: whatever happens in these tests happens by event.
const noTick = time.Hour

func TestReleaseWhenParentsEnd(t *testing.T) {
	r := newRig(t, filepath.Join(t.TempDir(), "db"))
	r.start(noTick)
	r.run("a")
	r.run("b")
	r.run("c", dep("a", core.WhenSucceeded), dep("b", core.WhenEnded))
	if q := r.queued(); strings.Join(q, ",") != "a,b" {
		t.Fatalf("queue = %v, want the waiting child left out", q)
	}
	r.end("a", core.StatusSucceeded)
	if tk := r.task("c"); !tk.Waiting {
		t.Fatalf("c released with b still going")
	}
	r.end("b", core.StatusFailed) // ended: enough
	ended := time.Now()
	r.wantStatus("c", core.StatusQueued, false)
	if d := r.releasedAt("c").Sub(ended); d > time.Second {
		t.Fatalf("c released %v after its last parent ended, want ≤ 1 s", d)
	}
	if q := r.queued(); strings.Join(q, ",") != "c" {
		t.Fatalf("queue = %v, want c", q)
	}
}

func TestCancelTransitively(t *testing.T) {
	r := newRig(t, filepath.Join(t.TempDir(), "db"))
	r.start(noTick)
	r.run("train")
	r.run("eval", dep("train", core.WhenSucceeded))
	r.run("report", dep("eval", core.WhenSucceeded))
	r.run("cleanup", dep("eval", core.WhenEnded))   // eval's cancel is an end
	r.run("alert", dep("train", core.WhenFailed))   // released by the failure
	r.run("onok", dep("alert", core.WhenSucceeded)) // still waits on alert
	r.end("train", core.StatusFailed)
	ev := r.wantStatus("eval", core.StatusCancelled, true)
	if ev.Reason != core.ReasonDependency || !strings.Contains(ev.Error, "train") || !strings.Contains(ev.Error, "FAILED") {
		t.Fatalf("eval: reason %q error %q, want dependency naming train", ev.Reason, ev.Error)
	}
	rep := r.wantStatus("report", core.StatusCancelled, true)
	if rep.Reason != core.ReasonDependency || !strings.Contains(rep.Error, "eval") {
		t.Fatalf("report: reason %q error %q, want dependency naming eval", rep.Reason, rep.Error)
	}
	r.wantStatus("cleanup", core.StatusQueued, false)
	r.wantStatus("alert", core.StatusQueued, false)
	if tk := r.task("onok"); tk.Status != core.StatusQueued || !tk.Waiting {
		t.Fatalf("onok: %s waiting %v, want still waiting", tk.Status, tk.Waiting)
	}
}

// A child made after its parent failed its condition is cancelled by
// Decide at once (what the REST API asks right after creating it); one
// made after its parents succeeded is released.
func TestDecideAtCreation(t *testing.T) {
	r := newRig(t, filepath.Join(t.TempDir(), "db"))
	r.start(noTick)
	r.run("p")
	r.end("p", core.StatusFailed)
	r.run("late", dep("p", core.WhenSucceeded))
	r.run("ok")
	r.end("ok", core.StatusSucceeded)
	r.run("late2", dep("ok", core.WhenSucceeded))
	c := depctl.New(depctl.Config{Store: r.st, Log: zerolog.Nop()})
	if n, err := c.Decide(t.Context(), []string{"late", "late2"}); err != nil || n != 2 {
		t.Fatalf("Decide = %d, %v; want 2 decided", n, err)
	}
	if tk := r.task("late"); tk.Status != core.StatusCancelled || tk.Reason != core.ReasonDependency {
		t.Fatalf("late: %s %q", tk.Status, tk.Reason)
	}
	if tk := r.task("late2"); tk.Status != core.StatusQueued || tk.Waiting {
		t.Fatalf("late2: %s waiting %v", tk.Status, tk.Waiting)
	}
}

// A parent that ended while no controller ran (a master that died between
// the end and the release) is decided when a controller starts on the
// store: the state is the store's.
func TestRestartDecidesStored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	r := newRig(t, path)
	r.run("p1")
	r.run("p2")
	r.run("c1", dep("p1", core.WhenSucceeded))
	r.run("c2", dep("p2", core.WhenSucceeded))
	r.run("c3", dep("c2", core.WhenEnded))
	r.end("p1", core.StatusSucceeded) // no controller: nobody hears it
	r.end("p2", core.StatusTimeout)
	if tk := r.task("c1"); !tk.Waiting {
		t.Fatal("released without a controller")
	}
	r.raw.Close()
	r2 := newRig(t, path) // the master again, on the same database
	r2.start(noTick)
	r2.wantStatus("c1", core.StatusQueued, false)
	r2.wantStatus("c2", core.StatusCancelled, true)
	r2.wantStatus("c3", core.StatusQueued, false) // c2's cancel ended it
}

// A large fan-in: 1,000 parents, one child; the child starts (is released)
// at the last parent's end, and the queue's window never holds it.
func TestFanIn(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 runs")
	}
	r := newRig(t, filepath.Join(t.TempDir(), "db"))
	r.start(noTick)
	var after []core.Dep
	ts := make([]*core.Task, 0, core.MaxParents)
	for i := range core.MaxParents {
		id := "p" + strings.Repeat("0", 4-len(itoa(i))) + itoa(i)
		ts = append(ts, &core.Task{ID: id, UserID: r.user.ID, Command: []string{"true"}})
		after = append(after, dep(id, core.WhenEnded))
	}
	for _, err := range r.st.CreateTasks(t.Context(), ts) {
		if err != nil {
			t.Fatal(err)
		}
	}
	r.run("child", after...)
	for i, p := range ts {
		if i == len(ts)-1 {
			break
		}
		r.end(p.ID, core.StatusSucceeded)
	}
	if tk := r.task("child"); !tk.Waiting {
		t.Fatal("child released before its last parent ended")
	}
	r.end(ts[len(ts)-1].ID, core.StatusFailed)
	ended := time.Now()
	r.wantStatus("child", core.StatusQueued, false)
	d := r.releasedAt("child").Sub(ended)
	t.Logf("child released %v after its last parent ended", d)
	if d > time.Second {
		t.Fatalf("child released %v after its last parent ended, want ≤ 1 s", d)
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
