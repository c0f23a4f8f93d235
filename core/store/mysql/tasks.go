package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
	"github.com/rlsched/rlsched/core/store/internal/sqlutil"
)

// CreateTask inserts t as a new QUEUED run with fence 0. An empty ID gets a
// new one; zero CreatedAt/UpdatedAt become now. t.UserID must name an
// existing user (core.ErrNotFound otherwise) and t.User is set from it; a
// taken ID is core.ErrConflict. On success t looks as a later read will.
func (s *Store) CreateTask(ctx context.Context, t *core.Task) error {
	if t.ID == "" {
		t.ID = core.NewTaskID()
	}
	if !core.ValidTaskID(t.ID) {
		return fmt.Errorf("cannot create run %q: invalid id", t.ID)
	}
	now := time.Now()
	if t.CreatedAt.IsZero() {
		t.CreatedAt = now
	}
	if t.UpdatedAt.IsZero() {
		t.UpdatedAt = now
	}
	t.Status, t.Fence = core.StatusQueued, 0
	r, err := sqlutil.EncodeTask(t)
	if err != nil {
		return fmt.Errorf("cannot create run %s: %w", t.ID, err)
	}
	// Users are never deleted, so the owner read and the INSERT need no
	// common transaction; the foreign key still refuses a vanished owner.
	var username string
	err = s.db.QueryRowContext(ctx, `SELECT username FROM users WHERE id = ?`, t.UserID).Scan(&username)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("cannot create run %s: owner %d: %w", t.ID, t.UserID, core.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("cannot create run %s: %w", t.ID, err)
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO tasks (id, name, project, user_id, status,
		attempt, max_retries, command, params, gpus, priority, env, tags, workdir, worker,
		gpu_indices, trace_id, exit_code, error, final_reward, git_commit, git_dirty,
		timeout_seconds, created_at, started_at, finished_at, updated_at, fence)
		VALUES (?,?,?,?,?, ?,?,?,?,?,?,?,?,?,?, ?,?,?,?,?,?,?, ?,?,?,?,?,?)`,
		t.ID, t.Name, t.Project, t.UserID, string(t.Status),
		t.Attempt, t.MaxRetries, r.Command, r.Params, t.GPUs, t.Priority, r.Env, r.Tags, t.Workdir, t.Worker,
		r.GPUIndices, t.TraceID, t.ExitCode, t.Error, r.FinalReward, t.Code.GitCommit, t.Code.GitDirty,
		t.TimeoutSeconds, r.Created, r.Started, r.Finished, r.Updated, r.Fence)
	switch {
	case isErr(err, errDupEntry):
		return fmt.Errorf("cannot create run %s: id taken: %w", t.ID, core.ErrConflict)
	case isErr(err, errNoReferencedRow):
		return fmt.Errorf("cannot create run %s: owner %d: %w", t.ID, t.UserID, core.ErrNotFound)
	case err != nil:
		return fmt.Errorf("cannot create run %s: %w", t.ID, err)
	}
	t.User = username
	sqlutil.Normalize(t, r)
	return nil
}

// Task returns the run with id, or core.ErrNotFound.
func (s *Store) Task(ctx context.Context, id string) (core.Task, error) {
	t, err := scanTask(s.db.QueryRowContext(ctx, taskCols+`WHERE t.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return core.Task{}, fmt.Errorf("cannot find run %s: %w", id, core.ErrNotFound)
	}
	if err != nil {
		return core.Task{}, fmt.Errorf("cannot read run %s: %w", id, err)
	}
	return t, nil
}

// execer is a pool or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// UpdateTask writes t's mutable fields in one conditional UPDATE: the row
// changes only while it still carries exp's fence and status. InnoDB
// evaluates the WHERE on the latest committed row under its row lock, so
// of concurrent writers from one state exactly one matches. When nothing
// matched, a look at the row tells core.ErrNotFound from core.ErrFenced
// (runs are never deleted, so the look needs no transaction). On success
// t.UpdatedAt is the time written.
func (s *Store) UpdateTask(ctx context.Context, t *core.Task, exp store.Expect) error {
	upd := *t
	upd.UpdatedAt = time.Now()
	r, err := sqlutil.EncodeUpdate(&upd)
	if err != nil {
		return fmt.Errorf("cannot update run %s: %w", t.ID, err)
	}
	if err := fencedUpdate(ctx, s.db, &upd, r, exp); err != nil {
		return fmt.Errorf("cannot update run %s: %w", t.ID, err)
	}
	t.UpdatedAt = sqlutil.Time(r.Updated)
	t.GPUIndices, _ = sqlutil.DecodeSlice[int](r.GPUIndices)
	t.StartedAt, t.FinishedAt = sqlutil.NullTime(r.Started), sqlutil.NullTime(r.Finished)
	return nil
}

// fencedUpdate is UpdateTask's statement on db (the pool or a transaction):
// upd's mutable fields, encoded as r, are written only where the row has
// exp's fence and status.
func fencedUpdate(ctx context.Context, db execer, upd *core.Task, r sqlutil.TaskRow, exp store.Expect) error {
	expFence, err := sqlutil.Fence(exp.Fence)
	if err != nil {
		return err
	}
	res, err := db.ExecContext(ctx, `UPDATE tasks SET status = ?, attempt = ?, fence = ?,
		worker = ?, gpu_indices = ?, exit_code = ?, error = ?, final_reward = ?,
		started_at = ?, finished_at = ?, updated_at = ?
		WHERE id = ? AND fence = ? AND status = ?`,
		string(upd.Status), upd.Attempt, r.Fence, upd.Worker, r.GPUIndices, upd.ExitCode,
		upd.Error, r.FinalReward, r.Started, r.Finished, r.Updated,
		upd.ID, expFence, string(exp.Status))
	if err != nil {
		return err
	}
	// id is the key and CLIENT_FOUND_ROWS is on, so one row means the swap
	// happened (even had it changed no value).
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return err
	}
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM tasks WHERE id = ?)`, upd.ID).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return core.ErrNotFound
	}
	return fmt.Errorf("expected fence %d and status %s: %w", exp.Fence, exp.Status, core.ErrFenced)
}

// SetFinalReward records a run's final reward (and bumps updated_at) without
// a fence: the reward is parsed from a log that is already exactly-once.
func (s *Store) SetFinalReward(ctx context.Context, id string, v float64) error {
	if err := sqlutil.CheckFinite("final reward", v); err != nil {
		return fmt.Errorf("cannot set final reward of run %s: %w", id, err)
	}
	res, err := s.db.ExecContext(ctx, `UPDATE tasks SET final_reward = ?, updated_at = ? WHERE id = ?`,
		v, time.Now().UnixNano(), id)
	if err != nil {
		return fmt.Errorf("cannot set final reward of run %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("cannot set final reward of run %s: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("cannot set final reward of run %s: %w", id, core.ErrNotFound)
	}
	return nil
}

// MaxFence returns the highest fence of any run, 0 for an empty store.
func (s *Store) MaxFence(ctx context.Context) (uint64, error) {
	var f int64
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(fence), 0) FROM tasks`).Scan(&f); err != nil {
		return 0, fmt.Errorf("cannot read highest fence: %w", err)
	}
	return uint64(f), nil
}
