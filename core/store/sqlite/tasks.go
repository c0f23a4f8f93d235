package sqlite

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

var _ store.Store = (*Store)(nil)

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
	var username string
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT username FROM users WHERE id = ?`, t.UserID).Scan(&username)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("owner %d: %w", t.UserID, core.ErrNotFound)
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO tasks (id, name, project, user_id, status,
			attempt, max_retries, command, params, gpus, priority, env, tags, workdir, worker,
			gpu_indices, trace_id, exit_code, error, final_reward, git_commit, git_dirty,
			timeout_seconds, created_at, started_at, finished_at, updated_at, fence)
			VALUES (?,?,?,?,?, ?,?,?,?,?,?,?,?,?,?, ?,?,?,?,?,?,?, ?,?,?,?,?,?)`,
			t.ID, t.Name, t.Project, t.UserID, string(t.Status),
			t.Attempt, t.MaxRetries, r.Command, r.Params, t.GPUs, t.Priority, r.Env, r.Tags, t.Workdir, t.Worker,
			r.GPUIndices, t.TraceID, t.ExitCode, t.Error, r.FinalReward, t.Code.GitCommit, t.Code.GitDirty,
			t.TimeoutSeconds, r.Created, r.Started, r.Finished, r.Updated, r.Fence)
		return err
	})
	if isUnique(err) {
		return fmt.Errorf("cannot create run %s: id taken: %w", t.ID, core.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("cannot create run %s: %w", t.ID, err)
	}
	t.User = username
	sqlutil.Normalize(t, r)
	return nil
}

// Task returns the run with id, or core.ErrNotFound.
func (s *Store) Task(ctx context.Context, id string) (core.Task, error) {
	t, err := scanTask(s.r.QueryRowContext(ctx, taskCols+`WHERE t.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return core.Task{}, fmt.Errorf("cannot find run %s: %w", id, core.ErrNotFound)
	}
	if err != nil {
		return core.Task{}, fmt.Errorf("cannot read run %s: %w", id, err)
	}
	return t, nil
}

// UpdateTask writes t's mutable fields in one conditional UPDATE: the row
// changes only while it still carries exp's fence and status. When nothing
// matched, a look inside the same transaction tells core.ErrNotFound from
// core.ErrFenced. On success t.UpdatedAt is the time written.
func (s *Store) UpdateTask(ctx context.Context, t *core.Task, exp store.Expect) error {
	upd := *t
	upd.UpdatedAt = time.Now()
	r, err := sqlutil.EncodeUpdate(&upd)
	if err != nil {
		return fmt.Errorf("cannot update run %s: %w", t.ID, err)
	}
	expFence, err := sqlutil.Fence(exp.Fence)
	if err != nil {
		return fmt.Errorf("cannot update run %s: %w", t.ID, err)
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE tasks SET status = ?, attempt = ?, fence = ?,
			worker = ?, gpu_indices = ?, exit_code = ?, error = ?, final_reward = ?,
			started_at = ?, finished_at = ?, updated_at = ?
			WHERE id = ? AND fence = ? AND status = ?`,
			string(upd.Status), upd.Attempt, r.Fence, upd.Worker, r.GPUIndices, upd.ExitCode,
			upd.Error, r.FinalReward, r.Started, r.Finished, r.Updated,
			upd.ID, expFence, string(exp.Status))
		if err != nil {
			return err
		}
		// id is the key, so one row means the swap happened.
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		if err := taskExists(ctx, tx, upd.ID); err != nil {
			return err
		}
		return fmt.Errorf("expected fence %d and status %s: %w", exp.Fence, exp.Status, core.ErrFenced)
	})
	if err != nil {
		return fmt.Errorf("cannot update run %s: %w", t.ID, err)
	}
	t.UpdatedAt = sqlutil.Time(r.Updated)
	t.GPUIndices, _ = sqlutil.DecodeSlice[int](r.GPUIndices)
	t.StartedAt, t.FinishedAt = sqlutil.NullTime(r.Started), sqlutil.NullTime(r.Finished)
	return nil
}

// SetFinalReward records a run's final reward (and bumps updated_at) without
// a fence: the reward is parsed from a log that is already exactly-once.
func (s *Store) SetFinalReward(ctx context.Context, id string, v float64) error {
	if err := sqlutil.CheckFinite("final reward", v); err != nil {
		return fmt.Errorf("cannot set final reward of run %s: %w", id, err)
	}
	res, err := s.w.ExecContext(ctx, `UPDATE tasks SET final_reward = ?, updated_at = ? WHERE id = ?`,
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
	if err := s.r.QueryRowContext(ctx, `SELECT COALESCE(MAX(fence), 0) FROM tasks`).Scan(&f); err != nil {
		return 0, fmt.Errorf("cannot read highest fence: %w", err)
	}
	return uint64(f), nil
}
