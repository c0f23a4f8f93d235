package sqlutil

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/rlsched/rlsched/core"
)

// The row codec of both SQL backends: they share one schema of runs.

// TaskCols selects a run with its owner's username; ScanTask reads them in
// this order. The username comes from users, so it can never disagree with
// user_id.
const TaskCols = `SELECT t.id, t.name, t.project, u.username, t.user_id, t.status, t.attempt,
	t.max_retries, t.command, t.params, t.gpus, t.priority, t.env, t.tags, t.workdir, t.worker,
	t.gpu_indices, t.trace_id, t.exit_code, t.error, t.final_reward, t.git_commit, t.git_dirty,
	t.timeout_seconds, t.created_at, t.started_at, t.finished_at, t.updated_at, t.fence,
	t.git_remote, t.diff_id, t.diff_omitted, t.sweep_id, t.rerun_of, t.resume_from, t.warnings,
	t.preemptible, t.preempt_grace, t.preemptions, t.preempted_at,
	t.cpus, t.memory_mb, t.private, t.kind, t.reason, t.usage_json, t.error_tail, t.note, t.baseline, t.history,
	t.gpu_fraction, t.placement_json, t.waiting, t.deps, t.python_env, t.code_tree, t.code_subdir
	FROM tasks t JOIN users u ON u.id = t.user_id `

// Scanner is a *sql.Row or *sql.Rows.
type Scanner interface{ Scan(dest ...any) error }

// ScanTask reads one row selected with TaskCols.
func ScanTask(sc Scanner) (core.Task, error) {
	var (
		t                       core.Task
		status, command, env    string
		tags, gpuIndices        string
		params                  *string
		exitCode                *int64
		reward                  *float64
		created, updated, fence int64
		started, finished       *int64
		warnings                *string
		preempted               *int64
		usage, errTail, note    *string
		history, placement      *string
		deps, python            *string
		codeSubdir              *string
	)
	err := sc.Scan(&t.ID, &t.Name, &t.Project, &t.User, &t.UserID, &status, &t.Attempt,
		&t.MaxRetries, &command, &params, &t.GPUs, &t.Priority, &env, &tags, &t.Workdir, &t.Worker,
		&gpuIndices, &t.TraceID, &exitCode, &t.Error, &reward, &t.Code.GitCommit, &t.Code.GitDirty,
		&t.TimeoutSeconds, &created, &started, &finished, &updated, &fence,
		&t.Code.GitRemote, &t.Code.DiffID, &t.Code.DiffOmitted, &t.SweepID, &t.RerunOf, &t.ResumeFrom, &warnings,
		&t.Preemptible, &t.PreemptGraceSeconds, &t.Preemptions, &preempted,
		&t.CPUs, &t.MemoryMB, &t.Private, &t.Kind, &t.Reason, &usage, &errTail, &note, &t.Baseline, &history,
		&t.GPUFraction, &placement, &t.Waiting, &deps, &python, &t.Code.Tree, &codeSubdir)
	if err != nil {
		return core.Task{}, err
	}
	t.Status, t.Params, t.FinalReward = core.Status(status), DecodeParams(params), reward
	if codeSubdir != nil {
		t.Code.Subdir = *codeSubdir
	}
	t.CreatedAt, t.UpdatedAt, t.Fence = Time(created), Time(updated), uint64(fence)
	if exitCode != nil {
		c := int(*exitCode)
		t.ExitCode = &c
	}
	t.StartedAt, t.FinishedAt, t.PreemptedAt = NullTime(started), NullTime(finished), NullTime(preempted)
	t.Code.HasDiff = t.Code.DiffID != ""
	if errTail != nil {
		t.ErrorTail = *errTail
	}
	if note != nil {
		t.Note = *note
	}
	if python != nil && *python != "" {
		t.Python = new(core.PythonEnv)
		if err := json.Unmarshal([]byte(*python), t.Python); err != nil {
			return core.Task{}, fmt.Errorf("run %s: cannot decode its python env: %w", t.ID, err)
		}
	}
	if history != nil && *history != "" {
		if err := json.Unmarshal([]byte(*history), &t.History); err != nil {
			return core.Task{}, fmt.Errorf("run %s: cannot decode its history: %w", t.ID, err)
		}
	}
	if err := decodePlacement(&t, placement); err != nil {
		return core.Task{}, err
	}
	if usage != nil && *usage != "" {
		t.Usage = new(core.Usage)
		if err := json.Unmarshal([]byte(*usage), t.Usage); err != nil {
			return core.Task{}, fmt.Errorf("run %s: cannot decode its usage: %w", t.ID, err)
		}
	}
	if t.Command, err = DecodeSlice[string](command); err != nil {
		return core.Task{}, fmt.Errorf("run %s: %w", t.ID, err)
	}
	if t.Tags, err = DecodeSlice[string](tags); err != nil {
		return core.Task{}, fmt.Errorf("run %s: %w", t.ID, err)
	}
	if t.GPUIndices, err = DecodeSlice[int](gpuIndices); err != nil {
		return core.Task{}, fmt.Errorf("run %s: %w", t.ID, err)
	}
	if t.Env, err = DecodeMap(env); err != nil {
		return core.Task{}, fmt.Errorf("run %s: %w", t.ID, err)
	}
	if t.Warnings, err = DecodeWarnings(warnings); err != nil {
		return core.Task{}, fmt.Errorf("run %s: %w", t.ID, err)
	}
	if err := decodeDeps(&t, deps); err != nil {
		return core.Task{}, fmt.Errorf("run %s: %w", t.ID, err)
	}
	return t, nil
}

// Querier is a pool or a transaction.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// QueryTasks runs a TaskCols query on db (the pool or a transaction). The
// result is never nil, so an empty page renders as [] in API JSON.
func QueryTasks(ctx context.Context, db Querier, q string, args ...any) ([]core.Task, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []core.Task{}
	for rows.Next() {
		t, err := ScanTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}
