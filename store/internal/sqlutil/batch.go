package sqlutil

import (
	"fmt"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// InsertTask is the INSERT of a new run; InsertArgs gives its arguments.
const InsertTask = `INSERT INTO tasks (id, name, project, user_id, status,
	attempt, max_retries, command, params, gpus, priority, env, tags, workdir, worker,
	gpu_indices, trace_id, exit_code, error, final_reward, git_commit, git_dirty,
	timeout_seconds, created_at, started_at, finished_at, updated_at, fence,
	git_remote, diff_id, diff_omitted, sweep_id, rerun_of, resume_from,
	preemptible, preempt_grace, preemptions, preempted_at,
	cpus, memory_mb, private, kind, reason, usage_json, error_tail, note, baseline,
	gpu_fraction, placement_json, waiting, deps, python_env,
	code_tree, code_subdir)
	VALUES (?,?,?,?,?, ?,?,?,?,?,?,?,?,?,?, ?,?,?,?,?,?,?, ?,?,?,?,?,?, ?,?,?,?,?,?, ?,?,?,?, ?,?,?,?,?,?,?,?,?, ?,?,?,?,?, ?,?)`

// InsertTaskValues is one more row's VALUES of a multi-row InsertTask.
const InsertTaskValues = `, (?,?,?,?,?, ?,?,?,?,?,?,?,?,?,?, ?,?,?,?,?,?,?, ?,?,?,?,?,?, ?,?,?,?,?,?, ?,?,?,?, ?,?,?,?,?,?,?,?,?, ?,?,?,?,?, ?,?)`

// UpdateColumns are the run's mutable columns, in the order of a
// PreparedUpdate's Args (PrepareUpdate): UpdateTask and the backends'
// set-based updates are built from them, so a new column is added here
// and in PrepareUpdate only.
var UpdateColumns = []string{"status", "attempt", "fence", "worker", "gpu_indices", "exit_code", "error",
	"final_reward", "started_at", "finished_at", "updated_at", "preemptions", "preempted_at",
	"cpus", "memory_mb", "reason", "usage_json", "error_tail", "history"}

// UpdateTask is the fenced UPDATE of a run's mutable fields; UpdateArgs
// gives its arguments.
var UpdateTask = "UPDATE tasks SET " + strings.Join(UpdateColumns, " = ?, ") + ` = ?
	WHERE id = ? AND fence = ? AND status = ?`

// PrepareCreate does CreateTask's checks and defaults on t (an empty ID gets
// a new one, zero times become now, status QUEUED and fence 0) and encodes it.
func PrepareCreate(t *core.Task, now time.Time) (TaskRow, error) {
	if t.ID == "" {
		t.ID = core.NewTaskID()
	}
	if !core.ValidTaskID(t.ID) {
		return TaskRow{}, fmt.Errorf("cannot create run %q: invalid id", t.ID)
	}
	if (t.SweepID != "" && !core.ValidTaskID(t.SweepID)) || (t.RerunOf != "" && !core.ValidTaskID(t.RerunOf)) {
		return TaskRow{}, fmt.Errorf("cannot create run %s: invalid sweep or rerun id", t.ID)
	}
	if t.ResumeFrom != "" && !core.ValidTaskID(t.ResumeFrom) {
		return TaskRow{}, fmt.Errorf("cannot create run %s: invalid resumeFrom %.80q", t.ID, t.ResumeFrom)
	}
	if t.Kind == "" {
		t.Kind = core.KindBatch
	}
	if t.Kind != core.KindBatch && t.Kind != core.KindInteractive {
		return TaskRow{}, fmt.Errorf("cannot create run %s: unknown kind %.20q", t.ID, t.Kind)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = now
	}
	if t.UpdatedAt.IsZero() {
		t.UpdatedAt = now
	}
	t.Status, t.Fence = core.StatusQueued, 0
	if err := checkDeps(t); err != nil {
		return TaskRow{}, err
	}
	// A run with parents waits for them (ReleaseWaiting ends the wait).
	t.Waiting = len(t.After) > 0
	r, err := EncodeTask(t)
	if err != nil {
		return r, fmt.Errorf("cannot create run %s: %w", t.ID, err)
	}
	return r, nil
}

// InsertArgs are InsertTask's arguments for t encoded as r.
func InsertArgs(t *core.Task, r TaskRow) []any {
	return []any{t.ID, t.Name, t.Project, t.UserID, string(t.Status),
		t.Attempt, t.MaxRetries, r.Command, r.Params, t.GPUs, t.Priority, r.Env, r.Tags, t.Workdir, t.Worker,
		r.GPUIndices, t.TraceID, t.ExitCode, t.Error, r.FinalReward, t.Code.GitCommit, t.Code.GitDirty,
		t.TimeoutSeconds, r.Created, r.Started, r.Finished, r.Updated, r.Fence,
		t.Code.GitRemote, t.Code.DiffID, t.Code.DiffOmitted, t.SweepID, t.RerunOf, t.ResumeFrom,
		t.Preemptible, t.PreemptGraceSeconds, t.Preemptions, r.Preempted,
		t.CPUs, t.MemoryMB, t.Private, t.Kind, t.Reason, r.Usage, t.ErrorTail, t.Note, t.Baseline,
		t.GPUFraction, r.Placement, t.Waiting, r.Deps, r.Python,
		t.Code.Tree, t.Code.Subdir}
}

// PreparedUpdate is one row of a batch update, encoded.
type PreparedUpdate struct {
	Row  TaskRow
	Args []any // UpdateTask's arguments
}

// PrepareUpdate encodes u with updated_at now; it does not touch u.Task.
func PrepareUpdate(u store.Update, now time.Time) (PreparedUpdate, error) {
	upd := *u.Task
	upd.UpdatedAt = now
	r, err := EncodeUpdate(&upd)
	if err != nil {
		return PreparedUpdate{}, fmt.Errorf("cannot update run %s: %w", upd.ID, err)
	}
	expFence, err := Fence(u.Expect.Fence)
	if err != nil {
		return PreparedUpdate{}, fmt.Errorf("cannot update run %s: %w", upd.ID, err)
	}
	return PreparedUpdate{Row: r, Args: []any{string(upd.Status), upd.Attempt, r.Fence, upd.Worker, r.GPUIndices, upd.ExitCode,
		upd.Error, r.FinalReward, r.Started, r.Finished, r.Updated, upd.Preemptions, r.Preempted,
		upd.CPUs, upd.MemoryMB, upd.Reason, r.Usage, upd.ErrorTail, r.History,
		upd.ID, expFence, string(u.Expect.Status)}}, nil
}

// Applied sets on t what a successful update wrote as r (updatedAt, and
// gpuIndices and the times normalised).
func Applied(t *core.Task, r TaskRow) {
	t.UpdatedAt = Time(r.Updated)
	// What EncodeInts wrote reads back as the same numbers; copied so the
	// task shares no list with the caller's.
	t.GPUIndices = append([]int{}, t.GPUIndices...)
	t.StartedAt, t.FinishedAt = NullTime(r.Started), NullTime(r.Finished)
	t.PreemptedAt = NullTime(r.Preempted)
	t.History = fillHistory(t.History, Time(r.Updated))
}

// FencedErr is a row's error when its update matched nothing but the run exists.
func FencedErr(id string, exp store.Expect) error {
	return fmt.Errorf("cannot update run %s: expected fence %d and status %s: %w", id, exp.Fence, exp.Status, core.ErrFenced)
}

// TxFailed gives every row that had no error of its own err (the
// transaction's), since then nothing was written.
func TxFailed(errs, pre []error, what func(i int) string, err error) {
	for i := range errs {
		if pre[i] != nil {
			errs[i] = pre[i]
		} else {
			errs[i] = fmt.Errorf("%s: %w", what(i), err)
		}
	}
}

// UpdateArgs is the number of UpdateTask's arguments, one PreparedUpdate's
// Args: the UpdateColumns values written, then id, expected fence,
// expected status.
var UpdateArgs = len(UpdateColumns) + 3

// Buckets are the row counts of the set-based update statements each
// backend prepares: a chunk of n rows runs as the smallest bucket ≥ n,
// padded with rows of NULLs that match nothing (NULL = x is never true).
// Powers of two up to store.DefaultMaxBatch keep the statement cache at
// ten entries and the padding under half a chunk.
var Buckets = []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}

// Chunks splits rows (indices into a batch) into chunks of at most the
// largest bucket, each with the bucket it runs as.
func Chunks(rows []int, f func(chunk []int, bucket int) error) error {
	max := Buckets[len(Buckets)-1]
	for len(rows) > 0 {
		n := min(len(rows), max)
		b := 0
		for _, b = range Buckets {
			if b >= n { // the smallest that holds n; max always does
				break
			}
		}
		if err := f(rows[:n], b); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// ChunkArgs are the arguments of a set-based update of bucket rows: the
// Args of each row of chunk in order, then NULLs for the padding.
func ChunkArgs(rows []PreparedUpdate, chunk []int, bucket int) []any {
	args := make([]any, 0, bucket*UpdateArgs)
	for _, i := range chunk {
		args = append(args, rows[i].Args...)
	}
	return append(args, make([]any, (bucket-len(chunk))*UpdateArgs)...)
}

// Rounds splits rows (indices into a batch, in batch order) into rounds in
// which no run appears twice: round k holds every run's k-th row, in batch
// order. A set-based UPDATE matches each target row at most once, so two
// rows of one run (the second expecting the first's write) must run in
// successive statements; rows of different runs touch different rows and
// may share one. Almost every batch is a single round.
func Rounds(rows []int, id func(i int) string) [][]int {
	var rounds [][]int
	seen := make(map[string]int, len(rows))
	for _, i := range rows {
		k := seen[id(i)]
		seen[id(i)] = k + 1
		if k == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[k] = append(rounds[k], i)
	}
	return rounds
}
