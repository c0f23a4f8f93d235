package sweepctl

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/sqlite"
	"github.com/rlsched/rlsched/sweep"
	"github.com/rlsched/rlsched/sweep/earlystop"
	"github.com/rlsched/rlsched/sweep/goal"
	"github.com/rlsched/rlsched/sweep/reference"
)

// t0 is the tests' clock: every start time is an offset of it, so the
// replay's order is the test's, whatever the machine's clock says.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// stops records StopEarly's calls; the test ends the runs as the
// dispatcher would.
type stops struct {
	mu    sync.Mutex
	calls map[string]string
}

func (s *stops) StopEarly(_ context.Context, id, why string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[id] = why
	return nil
}

// grower adds proposals to the store as httpapi does: template's run with
// the member's params.
type grower struct{ st store.Store }

func (g grower) AddMembers(ctx context.Context, sw store.Sweep, template core.Task, from int, ms []sweep.Member) error {
	runs := make([]*core.Task, len(ms))
	for i, m := range ms {
		runs[i] = &core.Task{ID: core.NewTaskID(), Name: m.Label, Command: template.Command, Params: m.Params,
			MaxRetries: 1, Tags: template.Tags, CreatedAt: t0.Add(time.Duration(from+i) * time.Millisecond)}
	}
	return g.st.AddSweepMembers(ctx, sw.ID, from, runs)
}

type bed struct {
	t     *testing.T
	st    store.Store
	stops *stops
	id    string
}

func newBed(t *testing.T, spec string) *bed {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	u := core.User{Username: "alice", PasswordHash: "x", Role: core.RoleUser}
	if err := st.CreateUser(t.Context(), &u); err != nil {
		t.Fatal(err)
	}
	s, err := sweep.Parse([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := s.Initial()
	if err != nil {
		t.Fatal(err)
	}
	id := core.NewSweepID()
	runs := make([]*core.Task, len(ms))
	for i, m := range ms {
		runs[i] = &core.Task{ID: core.NewTaskID(), Name: m.Label, UserID: u.ID, Command: []string{"python3", "t.py"},
			Params: m.Params, MaxRetries: 1, Tags: []string{core.SweepTag(id)}, CreatedAt: t0.Add(time.Duration(i) * time.Millisecond)}
	}
	sw := &store.Sweep{ID: id, Name: "s", UserID: u.ID, MaxParallel: s.MaxParallel, Spec: json.RawMessage(spec), CreatedAt: t0}
	if err := st.CreateSweep(t.Context(), sw, runs); err != nil {
		t.Fatal(err)
	}
	return &bed{t: t, st: st, stops: &stops{calls: map[string]string{}}, id: id}
}

func (b *bed) controller() *Controller {
	return New(Config{Store: b.st, Stopper: b.stops, Grower: grower{b.st}, Log: zerolog.Nop()})
}

func (b *bed) runs() []core.Task {
	b.t.Helper()
	runs, err := b.st.SweepRuns(b.t.Context(), b.id)
	if err != nil {
		b.t.Fatal(err)
	}
	return runs
}

// start moves run id to RUNNING, started at t0 + at.
func (b *bed) start(id string, at time.Duration) {
	b.t.Helper()
	tk, err := b.st.Task(b.t.Context(), id)
	if err != nil {
		b.t.Fatal(err)
	}
	exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
	if err := tk.Dispatch("w1", nil, uint64(len(id))); err != nil {
		b.t.Fatal(err)
	}
	if err := tk.Start(t0.Add(at)); err != nil {
		b.t.Fatal(err)
	}
	if err := b.st.UpdateTask(b.t.Context(), &tk, exp); err != nil {
		b.t.Fatal(err)
	}
}

// end ends run id as st (with reason), as the dispatcher records it.
func (b *bed) end(id string, st core.Status, reason, msg string) {
	b.t.Helper()
	tk, err := b.st.Task(b.t.Context(), id)
	if err != nil {
		b.t.Fatal(err)
	}
	exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
	code := 0
	if err := tk.Finish(st, &code, msg, t0.Add(time.Hour)); err != nil {
		b.t.Fatal(err)
	}
	tk.Reason = reason
	if err := b.st.UpdateTask(b.t.Context(), &tk, exp); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bed) report(id string, step int64, v float64) {
	b.t.Helper()
	if err := b.st.AppendMetrics(b.t.Context(), id, []core.MetricPoint{{Step: step, Name: "episode_reward", Value: v}}); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bed) step(c *Controller) {
	b.t.Helper()
	if err := c.Step(b.t.Context()); err != nil {
		b.t.Fatal(err)
	}
}

const ashaSpec = `{"method":"tpe","budget":6,"maxParallel":3,
	"random":{"lr":{"dist":"loguniform","min":1e-4,"max":1e-1}},
	"earlyStop":{"method":"asha","rungs":[10,30],"reductionFactor":3}}`

// TestControllerStopsAndProposes: members below a rung's cut are asked to
// stop, once, with the rung, step and cut in the message; their freed
// slots take the next proposals; a second controller on the same store (a
// restart, or another master) asks nothing again and adds nothing twice.
func TestControllerStopsAndProposes(t *testing.T) {
	b := newBed(t, ashaSpec)
	runs := b.runs()
	if len(runs) != 3 {
		t.Fatalf("a tpe sweep with maxParallel 3 starts with %d members; want 3", len(runs))
	}
	c := b.controller()
	b.step(c) // nothing has started: nothing to do
	if len(b.stops.calls) != 0 || len(b.runs()) != 3 {
		t.Fatalf("before any report: stops %v, %d members", b.stops.calls, len(b.runs()))
	}
	for i, v := range []float64{10, 5, 1} {
		b.start(runs[i].ID, time.Duration(i)*time.Second)
		b.report(runs[i].ID, 10, v)
	}
	b.step(c)
	want := map[string]string{
		runs[1].ID: "stopped at rung 1 (step 10): episode_reward 5 below the cut 10 of 2 members",
		runs[2].ID: "stopped at rung 1 (step 10): episode_reward 1 below the cut 10 of 3 members",
	}
	if fmt.Sprint(b.stops.calls) != fmt.Sprint(want) {
		t.Fatalf("stops %v; want %v", b.stops.calls, want)
	}
	if len(b.runs()) != 3 {
		t.Fatalf("%d members while 3 run; want no proposal", len(b.runs()))
	}
	b.stops.calls = map[string]string{}
	b.step(c) // in their grace: not asked again
	if len(b.stops.calls) != 0 {
		t.Fatalf("asked again: %v", b.stops.calls)
	}
	for _, id := range []string{runs[1].ID, runs[2].ID} {
		b.end(id, core.StatusCancelled, core.ReasonEarlyStopped, want[id])
	}
	b.step(c)
	runs = b.runs()
	if len(runs) != 5 || runs[3].Status != core.StatusQueued || runs[4].Status != core.StatusQueued {
		t.Fatalf("after two stops: %d members; want 5, the two new ones QUEUED", len(runs))
	}
	if runs[3].UserID != runs[0].UserID || !strings.Contains(string(runs[3].Params), `"lr":`) || string(runs[3].Params) == string(runs[4].Params) {
		t.Fatalf("proposals %s and %s", runs[3].Params, runs[4].Params)
	}

	again := b.controller() // a restarted master's, or another master's
	b.step(again)
	b.step(c)
	if len(b.stops.calls) != 0 || len(b.runs()) != 5 {
		t.Fatalf("a second controller: stops %v, %d members; want none, 5", b.stops.calls, len(b.runs()))
	}

	// The last proposal: both controllers at once add it once.
	b.report(runs[0].ID, 30, 20)
	b.end(runs[0].ID, core.StatusSucceeded, "", "")
	var wg sync.WaitGroup
	for _, ctl := range []*Controller{c, again} {
		wg.Add(1)
		go func() { defer wg.Done(); b.step(ctl) }()
	}
	wg.Wait()
	if n := len(b.runs()); n != 6 {
		t.Fatalf("%d members after the last proposal; want the budget, 6", n)
	}
	b.step(c)
	if n := len(b.runs()); n != 6 {
		t.Fatalf("%d members past the budget", n)
	}
}

// TestControllerSeeds: each proposal runs every seed, and a proposal is in
// flight while one of its seeds runs.
func TestControllerSeeds(t *testing.T) {
	b := newBed(t, `{"method":"tpe","budget":6,"maxParallel":4,"seedCount":2,
		"random":{"x":{"dist":"uniform","min":0,"max":1}}}`)
	runs := b.runs()
	if len(runs) != 4 {
		t.Fatalf("%d members; want 2 proposals × 2 seeds", len(runs))
	}
	c := b.controller()
	b.start(runs[0].ID, 0)
	b.report(runs[0].ID, 5, 1)
	b.end(runs[0].ID, core.StatusSucceeded, "", "")
	b.step(c)
	if n := len(b.runs()); n != 4 {
		t.Fatalf("one seed of two ended: %d members; want 4", n)
	}
	b.start(runs[1].ID, 0)
	b.end(runs[1].ID, core.StatusSucceeded, "", "")
	b.step(c)
	runs = b.runs()
	if len(runs) != 6 || string(runs[4].Params) == string(runs[5].Params) || runs[4].Name[:len(runs[4].Name)-1] != runs[5].Name[:len(runs[5].Name)-1] {
		t.Fatalf("after a proposal ended: %d members (%q, %q); want 6, a proposal of two seeds", len(runs), runs[4].Name, runs[5].Name)
	}
}

// TestJudge: the replay is in step order then start order, whatever the
// order of the members given; a member without a point is unreported and
// never stopped.
func TestJudge(t *testing.T) {
	cfg := earlystop.Config{Method: earlystop.ASHA, Goal: goal.Maximize, Rungs: []int64{10}, ReductionFactor: 2}
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	pts := func(v float64) [][2]float64 { return [][2]float64{{10, v}} }
	ms := []Member{
		{TaskID: "late", StartedAt: at(2 * time.Second), Status: core.StatusRunning, Series: pts(5)},
		{TaskID: "early", StartedAt: at(0), Status: core.StatusRunning, Series: pts(1)},
		{TaskID: "silent", StartedAt: at(time.Second), Status: core.StatusRunning},
		{TaskID: "queued", Status: core.StatusQueued},
	}
	j, err := Judge(cfg, ms, nil)
	if err != nil {
		t.Fatal(err)
	}
	// early reported first (alone: it continues), late beats it: no stop.
	if len(j.Stops) != 0 || fmt.Sprint(j.Unreported) != "[silent]" {
		t.Fatalf("Judge: stops %v, unreported %v; want none, [silent]", j.Stops, j.Unreported)
	}
	ms[0].Series, ms[1].Series = pts(1), pts(5)
	if j, _ = Judge(cfg, ms, nil); len(j.Stops) != 1 || j.Stops["late"].Cut != 5 {
		t.Fatalf("Judge: stops %v; want late, below early's 5", j.Stops)
	}
}

// TestControllerKeepsDecisions: each rung decision is kept once; a member
// that continued at a rung is not stopped there when a member that started
// earlier (and so is replayed first) reports its better value later.
func TestControllerKeepsDecisions(t *testing.T) {
	b := newBed(t, `{"method":"tpe","budget":3,"maxParallel":3,
		"random":{"lr":{"dist":"loguniform","min":1e-4,"max":1e-1}},
		"earlyStop":{"method":"asha","rungs":[10],"reductionFactor":2}}`)
	runs := b.runs()
	early, late, third := runs[0].ID, runs[1].ID, runs[2].ID
	c := b.controller()
	b.start(early, 0)
	b.start(late, time.Second)
	b.start(third, 2*time.Second)
	b.report(late, 10, 10)
	b.step(c) // late alone at the rung: it continues
	b.report(early, 10, 20)
	b.step(c) // replayed, early comes first and late would be below its cut
	if len(b.stops.calls) != 0 {
		t.Fatalf("stops %v; want none: late continued at the rung before early reported", b.stops.calls)
	}
	b.report(third, 10, 5)
	b.step(b.controller()) // a restarted master's: it reads the kept decisions, not c's memory
	if len(b.stops.calls) != 1 || b.stops.calls[third] == "" {
		t.Fatalf("stops %v; want third's only", b.stops.calls)
	}
	ds, err := b.st.SweepDecisions(t.Context(), b.id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range ds {
		got = append(got, fmt.Sprintf("%s rung %d step %d %g/%g of %d stop %v", map[string]string{early: "early", late: "late", third: "third"}[d.TaskID],
			d.Rung, d.Step, d.Value, d.Cut, d.Peers, d.Stop))
	}
	want := []string{
		"late rung 0 step 10 10/10 of 1 stop false",
		"early rung 0 step 10 20/20 of 1 stop false", // replayed first, before late

		"third rung 0 step 10 5/10 of 3 stop true",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("kept decisions\n%v\nwant\n%v", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestControllerMedian: under the median stopping rule the controller asks
// to stop a member whose best is below the median of the others' running
// averages, with the rule's message; a member that reports nothing is never
// stopped for it; no rung decision is kept (the rule has no rungs).
func TestControllerMedian(t *testing.T) {
	b := newBed(t, `{"random":{"lr":{"dist":"loguniform","min":1e-4,"max":1e-1}},"samples":5,
		"earlyStop":{"method":"median","minSteps":10}}`)
	runs := b.runs()
	if len(runs) != 5 {
		t.Fatalf("%d members; want 5", len(runs))
	}
	for i, v := range []float64{5, 6, 7, 1} {
		b.start(runs[i].ID, time.Duration(i)*time.Second)
		b.report(runs[i].ID, 10, v)
	}
	b.start(runs[4].ID, 5*time.Second) // reports nothing
	c := b.controller()
	b.step(c)
	want := map[string]string{runs[3].ID: "stopped at step 10: best episode_reward 1 below the median 6 of 3 other members' running averages"}
	if fmt.Sprint(b.stops.calls) != fmt.Sprint(want) {
		t.Fatalf("stops %v; want %v", b.stops.calls, want)
	}
	if ds, err := b.st.SweepDecisions(t.Context(), b.id); err != nil || len(ds) != 0 {
		t.Fatalf("kept decisions %v (%v); want none under the median rule", ds, err)
	}
}

// TestControllerReference: the controller on a real store drives a tpe +
// ASHA sweep of 100 members on issue 35's reference problem (the members'
// curves reported to the store, every 100 steps to 1,000, 6 at a time):
// it stops members at the rungs with their reasons kept, runs well under
// the steps of the sweep run to the end, and finds the optimum's region.
func TestControllerReference(t *testing.T) {
	const budget, steps, every = 100, 1000, 50
	b := newBed(t, `{"method":"tpe","budget":100,"maxParallel":6,"randomSeed":1,"random":`+reference.Random+`,
		"earlyStop":{"method":"asha","minSteps":37}}`)
	spec, err := sweep.Parse(b.sweepSpec())
	if err != nil {
		t.Fatal(err)
	}
	c := b.controller()
	at := map[string]int64{} // each started member's last step reported
	var ran int64
	for round := 0; ; round++ {
		if round > 10*budget {
			t.Fatal("the sweep never ended")
		}
		active := 0
		for _, r := range b.runs() {
			if r.Status.Terminal() {
				continue
			}
			active++
			if why, ok := b.stops.calls[r.ID]; ok {
				b.end(r.ID, core.StatusCancelled, core.ReasonEarlyStopped, why)
				continue
			}
			if r.Status == core.StatusQueued {
				b.start(r.ID, time.Duration(round)*time.Second)
			}
			x, err := spec.Point(r.Params)
			if err != nil {
				t.Fatal(err)
			}
			at[r.ID] += every
			ran += every
			b.report(r.ID, at[r.ID], reference.Curve(x, float64(at[r.ID])))
			if at[r.ID] >= steps {
				b.end(r.ID, core.StatusSucceeded, "", "")
			}
		}
		if active == 0 && len(b.runs()) == budget {
			break
		}
		b.step(c)
	}
	best := 0.0
	stopped := 0
	for _, r := range b.runs() {
		x, _ := spec.Point(r.Params)
		switch {
		case r.Reason == core.ReasonEarlyStopped:
			stopped++
			if !strings.HasPrefix(r.Error, "stopped at rung ") {
				t.Errorf("run %s stopped with %q; want its rung", r.ID, r.Error)
			}
		case r.Status == core.StatusSucceeded:
			best = max(best, reference.Final(x))
		}
	}
	ds, err := b.st.SweepDecisions(t.Context(), b.id)
	if err != nil {
		t.Fatal(err)
	}
	keptStops := 0
	for _, d := range ds {
		if d.Stop {
			keptStops++
		}
	}
	saved := 1 - float64(ran)/float64(budget*steps)
	t.Logf("%d of %d members stopped early, %.0f%% of the steps saved, best final %.3f", stopped, budget, 100*saved, best)
	if stopped == 0 || keptStops != stopped {
		t.Errorf("%d members stopped, %d stops kept; want some, each kept", stopped, keptStops)
	}
	if saved < 0.5 {
		t.Errorf("%.0f%% of the steps saved; want ≥ 50%%", 100*saved)
	}
	if best < 0.9*reference.Optimum {
		t.Errorf("best member's final %.3f; want within 10%% of the optimum %v", best, reference.Optimum)
	}
}

// sweepSpec is the bed's sweep's stored spec.
func (b *bed) sweepSpec() []byte {
	b.t.Helper()
	sw, err := b.st.Sweep(b.t.Context(), b.id)
	if err != nil {
		b.t.Fatal(err)
	}
	return sw.Spec
}

// TestJudgeEnded: a member whose last report crossed a rung as it ended is
// judged with the others, but a stop of it is not kept: it was never made.
func TestJudgeEnded(t *testing.T) {
	cfg := earlystop.Config{Method: earlystop.ASHA, Goal: goal.Maximize, Rungs: []int64{10}, ReductionFactor: 2}
	start := t0
	ms := []Member{
		{TaskID: "first", StartedAt: &start, Status: core.StatusRunning, Series: [][2]float64{{10, 5}}},
		{TaskID: "done", StartedAt: &start, Status: core.StatusSucceeded, Series: [][2]float64{{10, 1}}},
	}
	j, err := Judge(cfg, ms, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(j.New) != 1 || j.New[0].Member != "first" || j.New[0].Stop {
		t.Fatalf("new decisions %+v; want only first's continue", j.New)
	}
}
