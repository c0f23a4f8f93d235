package store

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/rlsched/rlsched/core"
)

// rereadTimeout bounds the read-back of a run after a write, also when the
// writer's context ended right after the write.
const rereadTimeout = 5 * time.Second

// fixedGen bounds one generation of the runs whose fixed fields the
// decorator remembers: a full generation becomes the older one, and the
// older one is dropped, so at most 2×fixedGen runs are held and a run
// looked at since the last turn is kept (a miss only costs a read-back).
// Each cost ~1.2 KB of heap as a whole core.Task: at 1<<16 in one map, a master taking
// submissions that nothing starts (rest-submit) held 65,536 queued runs,
// 75 MB of its ~95 MB live heap (issue 33). The runs of a pass (the
// queue's head, those started and ending) are looked at within a turn.
const fixedGen = 1 << 13

// Publishing wraps st so that every run it creates or changes
// (CreateTask(s), UpdateTask(s), SetFinalReward, AddWarning) is published
// to sink as the store now has it. Writes that fail publish nothing, and a
// failed read-back only loses the event, never the write. Everything else
// passes through. Safe for concurrent use, as st is.
//
// A run's event is built without reading it back when possible: an update
// writes exactly the mutable fields of the task it is given (store.Store's
// UpdateTask), and every other field is fixed at creation, so the run as
// stored is the fields remembered from its creation or a read (CreateTask,
// QueuedTasks, ActiveTasks, Task, an earlier read-back) with the written
// ones on top. That holds with several masters sharing the store too, since
// nobody changes the fixed fields. Only SetFinalReward and AddWarning, which
// write one field of a run whose other mutable fields they do not know,
// and a run not remembered, read the run back (warnings are remembered
// with the fixed fields; another master's are seen at the next read-back).
// (Profiles of the dispatch benchmark had the read-back at a third of the
// master's CPU.)
//
// It must be the outermost store of the master (Stack puts it there): a
// decorator outside it could change a run without the change being
// published.
func Publishing(st Store, sink core.EventSink) Store {
	return &publisher{Store: st, sink: sink, fixed: map[string]*fixedRun{}, older: map[string]*fixedRun{}}
}

// publisher is the store of Publishing.
type publisher struct {
	Store
	sink core.EventSink
	// locks serialise the writes of one run with its publication, so a
	// run's events go out in the order its writes committed. They are per
	// run, not striped: a write holds its lock until its group commit, and
	// the scheduler's batch of QUEUED runs, sharing stripes with the
	// TaskStarted/TaskFinished writes of running ones, waited for one
	// commit after another (5-100 ms a pass in the dispatch benchmark).
	locks runLocks

	fixedMu sync.Mutex
	// fixed holds, by run id, a private copy of a run as once stored; only
	// its fields that never change after creation are used. Runs leave it
	// when they end (a later change reads them back once). older is the
	// generation before (fixedGen); a run found there moves to fixed.
	fixed, older map[string]*fixedRun
}

// lookup returns the remembered copy of run id, or nil; under fixedMu.
func (ts *publisher) lookup(id string) *fixedRun {
	if f := ts.fixed[id]; f != nil {
		return f
	}
	f := ts.older[id]
	if f != nil {
		delete(ts.older, id)
		ts.put(f)
	}
	return f
}

// put remembers f, turning the generations when fixed is full; under
// fixedMu.
func (ts *publisher) put(f *fixedRun) {
	if len(ts.fixed) >= fixedGen {
		ts.older, ts.fixed = ts.fixed, make(map[string]*fixedRun, fixedGen)
	}
	ts.fixed[f.ID] = f
}

// fixedRun is what is remembered of a run: the fields of core.Task that
// remember copies, alone (a whole core.Task is 928 bytes, most of them
// the mutable fields, which the events take from the writer's task).
type fixedRun struct {
	ID, Name, Project, User      string
	UserID                       int64
	MaxRetries, GPUs, Priority   int
	Command, Tags, InputsFrom    []string
	Params                       json.RawMessage
	Env                          map[string]string
	Workdir, TraceID             string
	Code                         core.CodeInfo
	TimeoutSeconds               int
	CreatedAt                    time.Time
	SweepID, RerunOf, ResumeFrom string
	Warnings                     []core.Warning
	Preemptible, Private         bool
	Baseline                     bool
	PreemptGraceSeconds          int
	Kind, Note                   string
	After                        []core.Dep
	Python                       *core.PythonEnv
	Nodes                        int
	// Where the run may go (issue 27, 28): an event without them showed
	// a fractional run as asking for no GPU.
	Image       string
	GPUFraction float64
	GPUMemoryMB int64
	GPUType     []string
	Constraints map[string]string
}

// task is the run with f's fields, the others zero.
func (f *fixedRun) task() core.Task {
	return core.Task{ID: f.ID, Name: f.Name, Project: f.Project, User: f.User, UserID: f.UserID,
		MaxRetries: f.MaxRetries, Command: f.Command, Params: f.Params,
		GPUs: f.GPUs, Priority: f.Priority, Env: f.Env, Tags: f.Tags,
		Workdir: f.Workdir, TraceID: f.TraceID, Code: f.Code, TimeoutSeconds: f.TimeoutSeconds,
		CreatedAt: f.CreatedAt, SweepID: f.SweepID, RerunOf: f.RerunOf, ResumeFrom: f.ResumeFrom, Warnings: f.Warnings,
		Preemptible: f.Preemptible, PreemptGraceSeconds: f.PreemptGraceSeconds,
		Private: f.Private, Kind: f.Kind, Note: f.Note, Baseline: f.Baseline,
		After: f.After, InputsFrom: f.InputsFrom, Python: f.Python,
		Nodes: f.Nodes, Image: f.Image, GPUFraction: f.GPUFraction, GPUMemoryMB: f.GPUMemoryMB, GPUType: f.GPUType,
		Constraints: f.Constraints}
}

// remember keeps t's fixed fields, copied, unless already known.
func (ts *publisher) remember(t *core.Task) *fixedRun {
	ts.fixedMu.Lock()
	defer ts.fixedMu.Unlock()
	if f := ts.lookup(t.ID); f != nil {
		return f
	}
	// Copied so that a caller changing its task afterwards cannot change
	// later events; the events share this copy, which nothing writes.
	f := &fixedRun{ID: t.ID, Name: t.Name, Project: t.Project, User: t.User, UserID: t.UserID,
		MaxRetries: t.MaxRetries, Command: slices.Clone(t.Command), Params: slices.Clone(t.Params),
		GPUs: t.GPUs, Priority: t.Priority, Env: maps.Clone(t.Env), Tags: slices.Clone(t.Tags),
		Workdir: t.Workdir, TraceID: t.TraceID, Code: t.Code, TimeoutSeconds: t.TimeoutSeconds,
		CreatedAt: t.CreatedAt, SweepID: t.SweepID, RerunOf: t.RerunOf, ResumeFrom: t.ResumeFrom, Warnings: slices.Clone(t.Warnings),
		Preemptible: t.Preemptible, PreemptGraceSeconds: t.PreemptGraceSeconds,
		Private: t.Private, Kind: t.Kind, Note: t.Note, Baseline: t.Baseline,
		After: slices.Clone(t.After), InputsFrom: slices.Clone(t.InputsFrom), Python: t.Python,
		Nodes: t.Nodes, Image: t.Image, GPUFraction: t.GPUFraction, GPUMemoryMB: t.GPUMemoryMB, GPUType: slices.Clone(t.GPUType),
		Constraints: maps.Clone(t.Constraints)}
	ts.put(f)
	return f
}

// rememberWarnings replaces the warnings remembered of t's run by t's, as
// read back after AddWarning: the one field besides the fixed ones that no
// update writes. The remembered copy is replaced, never changed, since
// events share it.
func (ts *publisher) rememberWarnings(t *core.Task) {
	ts.fixedMu.Lock()
	defer ts.fixedMu.Unlock()
	if f := ts.lookup(t.ID); f != nil {
		g := *f
		g.Warnings = slices.Clone(t.Warnings)
		ts.fixed[t.ID] = &g // lookup left it in fixed
	}
}

// known returns the remembered fixed fields of run id, or nil.
func (ts *publisher) known(id string) *fixedRun {
	ts.fixedMu.Lock()
	defer ts.fixedMu.Unlock()
	return ts.lookup(id)
}

func (ts *publisher) forget(id string) {
	ts.fixedMu.Lock()
	defer ts.fixedMu.Unlock()
	delete(ts.fixed, id)
	delete(ts.older, id)
}

// written is the run as stored after a successful update of t: the fixed
// fields of f and the mutable ones store.Store's UpdateTask wrote from t
// (which the store has set to the values written).
func written(f *fixedRun, t *core.Task) core.Task {
	v := f.task()
	v.Status, v.Attempt, v.Fence, v.Worker, v.Error = t.Status, t.Attempt, t.Fence, t.Worker, t.Error
	// The writer's run was read from the store, so its priority is at least
	// as new as the remembered one (another master may have set it: SetPriority).
	v.Priority = t.Priority
	v.GPUIndices = slices.Clone(t.GPUIndices)
	if v.GPUIndices == nil {
		v.GPUIndices = []int{} // as a read gives it
	}
	v.ExitCode, v.FinalReward = clonePtr(t.ExitCode), clonePtr(t.FinalReward)
	v.StartedAt, v.FinishedAt, v.UpdatedAt = clonePtr(t.StartedAt), clonePtr(t.FinishedAt), t.UpdatedAt
	v.Preemptions, v.PreemptedAt = t.Preemptions, clonePtr(t.PreemptedAt)
	v.CPUs, v.MemoryMB, v.Reason, v.Usage, v.ErrorTail = t.CPUs, t.MemoryMB, t.Reason, clonePtr(t.Usage), t.ErrorTail
	v.History = slices.Clone(t.History)
	return v
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// publishWritten publishes the run t as its successful update left it.
func (ts *publisher) publishWritten(ctx context.Context, t *core.Task) {
	f := ts.known(t.ID)
	if f == nil {
		ts.publish(ctx, t.ID)
		return
	}
	if t.Status.Terminal() {
		ts.forget(t.ID)
	}
	ts.sink.TaskChanged(written(f, t))
}

// publishCreated publishes a run just created: the store has made t look
// as a read of it will.
func (ts *publisher) publishCreated(t *core.Task) {
	f := ts.remember(t)
	ts.sink.TaskChanged(written(f, t))
}

func (ts *publisher) Task(ctx context.Context, id string) (core.Task, error) {
	t, err := ts.Store.Task(ctx, id)
	if err == nil && !t.Status.Terminal() {
		ts.remember(&t)
	}
	return t, err
}

func (ts *publisher) QueuedTasks(ctx context.Context, limit int) ([]core.Task, error) {
	out, err := ts.Store.QueuedTasks(ctx, limit)
	for i := range out {
		ts.remember(&out[i])
	}
	return out, err
}

func (ts *publisher) ActiveTasks(ctx context.Context) ([]core.Task, error) {
	out, err := ts.Store.ActiveTasks(ctx)
	for i := range out {
		ts.remember(&out[i])
	}
	return out, err
}

// runLocks are mutexes by run id, each existing while held or awaited.
type runLocks struct {
	mu sync.Mutex
	m  map[string]*runLock
}

type runLock struct {
	sync.Mutex
	refs int // holders and waiters; guarded by runLocks.mu
}

// lock locks the run id and returns the unlock.
func (l *runLocks) lock(id string) func() {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*runLock{}
	}
	rl := l.m[id]
	if rl == nil {
		rl = &runLock{}
		l.m[id] = rl
	}
	rl.refs++
	l.mu.Unlock()
	rl.Lock()
	return func() { l.unlock(id, rl) }
}

func (l *runLocks) unlock(id string, rl *runLock) {
	rl.Unlock()
	l.mu.Lock()
	if rl.refs--; rl.refs == 0 {
		delete(l.m, id)
	}
	l.mu.Unlock()
}

// lockAll locks the runs ids, each once and in id order (so two batches
// cannot deadlock), and returns the unlock.
func (l *runLocks) lockAll(ids []string) func() {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	unlocks := make([]func(), len(ids))
	for i, id := range ids {
		unlocks[i] = l.lock(id)
	}
	return func() {
		for _, u := range unlocks {
			u()
		}
	}
}

func (ts *publisher) CreateTask(ctx context.Context, t *core.Task) error {
	if t.ID == "" {
		// The store assigns nothing else an id could depend on; serialise
		// after the write, when the id is known.
		if err := ts.Store.CreateTask(ctx, t); err != nil {
			return err
		}
		defer ts.locks.lock(t.ID)()
		ts.publishCreated(t)
		return nil
	}
	defer ts.locks.lock(t.ID)()
	if err := ts.Store.CreateTask(ctx, t); err != nil {
		return err
	}
	ts.publishCreated(t)
	return nil
}

func (ts *publisher) UpdateTask(ctx context.Context, t *core.Task, exp Expect) error {
	defer ts.locks.lock(t.ID)()
	if err := ts.Store.UpdateTask(ctx, t, exp); err != nil {
		return err
	}
	ts.publishStart(t, exp.Status)
	ts.publishWritten(ctx, t)
	return nil
}

// publishStart publishes the RUNNING that a write from DISPATCHED straight
// to an end, with a start, passed over (a TaskFinished that superseded its
// TaskStarted, or one whose TaskStarted was lost): whoever follows the run
// sees it start, then end.
func (ts *publisher) publishStart(t *core.Task, from core.Status) {
	if from != core.StatusDispatched || !t.Status.Terminal() || t.StartedAt == nil {
		return
	}
	f := ts.known(t.ID)
	if f == nil {
		return // published from a read: as it is
	}
	r := written(f, t)
	r.Status, r.FinishedAt, r.ExitCode, r.Error = core.StatusRunning, nil, nil, ""
	ts.sink.TaskChanged(r)
}

// CreateTasks creates ts in one batch of the wrapped store and publishes
// each run created.
func (ts *publisher) CreateTasks(ctx context.Context, tasks []*core.Task) []error {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		if t.ID == "" {
			t.ID = core.NewTaskID() // as the store would: the lock needs it now
		}
		ids[i] = t.ID
	}
	defer ts.locks.lockAll(ids)()
	errs := ts.Store.CreateTasks(ctx, tasks)
	for i, err := range errs {
		if err == nil {
			ts.publishCreated(tasks[i])
		}
	}
	return errs
}

// UpdateTasks applies us in one batch of the wrapped store and publishes
// each run changed (once per row that succeeded, in row order).
func (ts *publisher) UpdateTasks(ctx context.Context, us []Update) []error {
	ids := make([]string, len(us))
	for i, u := range us {
		ids[i] = u.Task.ID
	}
	defer ts.locks.lockAll(ids)()
	errs := ts.Store.UpdateTasks(ctx, us)
	for i, err := range errs {
		if err == nil {
			ts.publishStart(us[i].Task, us[i].Expect.Status)
			ts.publishWritten(ctx, us[i].Task)
		}
	}
	return errs
}

func (ts *publisher) SetFinalReward(ctx context.Context, id string, v float64) error {
	defer ts.locks.lock(id)()
	if err := ts.Store.SetFinalReward(ctx, id, v); err != nil {
		return err
	}
	ts.publish(ctx, id)
	return nil
}

// AddWarning appends a warning and publishes the run with it.
func (ts *publisher) AddWarning(ctx context.Context, id string, w core.Warning) error {
	defer ts.locks.lock(id)()
	if err := ts.Store.AddWarning(ctx, id, w); err != nil {
		return err
	}
	ts.publish(ctx, id)
	return nil
}

// EditRecord edits a run's record and publishes it. The remembered fields
// of the run are replaced by the edited ones, which are among them: an
// event of a later state change carries the edit. (Another master's
// memory of the run keeps the old record until it reads the run again;
// its events may show the old name or tags until then.)
func (ts *publisher) EditRecord(ctx context.Context, id string, e RecordEdit) (core.Task, error) {
	defer ts.locks.lock(id)()
	t, err := ts.Store.EditRecord(ctx, id, e)
	if err != nil {
		return t, err
	}
	ts.forget(id)
	if !t.Status.Terminal() {
		ts.remember(&t)
	}
	ts.sink.TaskChanged(t)
	return t, nil
}

// publish reads run id back and publishes it as stored.
func (ts *publisher) publish(ctx context.Context, id string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rereadTimeout)
	defer cancel()
	t, err := ts.Store.Task(rctx, id)
	if err != nil {
		return
	}
	if !t.Status.Terminal() {
		ts.remember(&t)
		ts.rememberWarnings(&t)
	}
	ts.sink.TaskChanged(t)
}

// CreateSweep creates the sweep and publishes each member's run.
func (ts *publisher) CreateSweep(ctx context.Context, sw *Sweep, members []*core.Task) error {
	ids := make([]string, len(members))
	for i, t := range members {
		ids[i] = t.ID
	}
	defer ts.locks.lockAll(ids)()
	if err := ts.Store.CreateSweep(ctx, sw, members); err != nil {
		return err
	}
	for _, t := range members {
		ts.publishCreated(t)
	}
	return nil
}

// AddSweepMembers adds the members and publishes each one's run.
func (ts *publisher) AddSweepMembers(ctx context.Context, id string, from int, members []*core.Task) error {
	ids := make([]string, len(members))
	for i, t := range members {
		ids[i] = t.ID
	}
	defer ts.locks.lockAll(ids)()
	if err := ts.Store.AddSweepMembers(ctx, id, from, members); err != nil {
		return err
	}
	for _, t := range members {
		ts.publishCreated(t)
	}
	return nil
}

// RetrySweep retries the sweep and publishes each new run. Their ids are
// the store's to give, so each is locked once known, like CreateTask's.
func (ts *publisher) RetrySweep(ctx context.Context, id string, rerun func(core.Task) core.Task) ([]core.Task, error) {
	out, err := ts.Store.RetrySweep(ctx, id, rerun)
	for i := range out {
		unlock := ts.locks.lock(out[i].ID)
		ts.publishCreated(&out[i])
		unlock()
	}
	return out, err
}
