package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
	"github.com/rlsched/rlsched/core/store/internal/sqlutil"
)

// CreateTask inserts t as a new QUEUED run with fence 0. An empty ID gets a
// new one; zero CreatedAt/UpdatedAt become now. t.UserID must name an
// existing user (core.ErrNotFound otherwise) and t.User is set from it; a
// taken ID is core.ErrConflict. On success t looks as a later read will.
func (s *Store) CreateTasks(ctx context.Context, ts []*core.Task) []error {
	errs := make([]error, len(ts))
	pre := make([]error, len(ts))
	rows := make([]sqlutil.TaskRow, len(ts))
	names := make([]string, len(ts))
	now := time.Now()
	todo := 0
	for i, t := range ts {
		if rows[i], pre[i] = sqlutil.PrepareCreate(t, now); pre[i] == nil {
			todo++
		}
	}
	copy(errs, pre)
	if todo == 0 {
		return errs
	}
	// Users are never deleted, so the owner reads need no common
	// transaction with the INSERTs; the foreign key still refuses a
	// vanished owner.
	owners := map[int64]*string{}
	for i, t := range ts {
		if pre[i] != nil {
			continue
		}
		if _, seen := owners[t.UserID]; seen {
			continue
		}
		var name string
		err := s.db.QueryRowContext(ctx, `SELECT username FROM users WHERE id = ?`, t.UserID).Scan(&name)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			owners[t.UserID] = nil
		case err != nil:
			sqlutil.TxFailed(errs, pre, func(i int) string { return "cannot create run " + ts[i].ID }, err)
			return errs
		default:
			owners[t.UserID] = &name
		}
	}
	// Inserted in id order (stable), as UpdateTasks does, so concurrent
	// batches meet their key locks in one order; InnoDB can still pick a
	// deadlock victim among duplicate inserts, and retryTx runs it again.
	order := make([]int, 0, todo)
	for i := range ts {
		if pre[i] == nil {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return ts[order[a]].ID < ts[order[b]].ID })
	err := s.retryTx(ctx, func(tx *sql.Tx) error {
		copy(errs, pre)
		// A failed INSERT (duplicate key, missing owner) rolls back only
		// its own statement in InnoDB; the transaction goes on.
		for _, i := range order {
			t := ts[i]
			owner := owners[t.UserID]
			if owner == nil {
				errs[i] = fmt.Errorf("cannot create run %s: owner %d: %w", t.ID, t.UserID, core.ErrNotFound)
				continue
			}
			_, err := tx.ExecContext(ctx, sqlutil.InsertTask, sqlutil.InsertArgs(t, rows[i])...)
			switch {
			case isErr(err, errDupEntry):
				errs[i] = fmt.Errorf("cannot create run %s: id taken: %w", t.ID, core.ErrConflict)
			case isErr(err, errNoReferencedRow):
				errs[i] = fmt.Errorf("cannot create run %s: owner %d: %w", t.ID, t.UserID, core.ErrNotFound)
			case err != nil:
				return err
			default:
				names[i] = *owner
			}
		}
		return nil
	})
	if err != nil {
		sqlutil.TxFailed(errs, pre, func(i int) string { return "cannot create run " + ts[i].ID }, err)
		return errs
	}
	for i, t := range ts {
		if errs[i] == nil {
			t.User = names[i]
			sqlutil.Normalize(t, rows[i])
		}
	}
	return errs
}

// CreateTask is CreateTasks of one run.
func (s *Store) CreateTask(ctx context.Context, t *core.Task) error {
	return s.CreateTasks(ctx, []*core.Task{t})[0]
}

// Task returns the run with id, or core.ErrNotFound.
func (s *Store) Task(ctx context.Context, id string) (core.Task, error) {
	t, err := sqlutil.ScanTask(s.db.QueryRowContext(ctx, sqlutil.TaskCols+`WHERE t.id = ?`, id))
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
// (runs are never deleted). On success t.UpdatedAt is the time written.
func (s *Store) UpdateTask(ctx context.Context, t *core.Task, exp store.Expect) error {
	return s.UpdateTasks(ctx, []store.Update{{Task: t, Expect: exp}})[0]
}

// UpdateTasks runs UpdateTask's conditional UPDATE for every row in one
// transaction. Rows are applied in id order (stable, so two rows of one
// run keep their order): concurrent batches then lock rows in the same
// order and cannot deadlock one another; a deadlock with some other
// writer is retried.
func (s *Store) UpdateTasks(ctx context.Context, us []store.Update) []error {
	errs := make([]error, len(us))
	pre := make([]error, len(us))
	rows := make([]sqlutil.PreparedUpdate, len(us))
	now := time.Now()
	order := make([]int, 0, len(us))
	for i, u := range us {
		if rows[i], pre[i] = sqlutil.PrepareUpdate(u, now); pre[i] == nil {
			order = append(order, i)
		}
	}
	copy(errs, pre)
	if len(order) == 0 {
		return errs
	}
	sort.SliceStable(order, func(a, b int) bool { return us[order[a]].Task.ID < us[order[b]].Task.ID })
	err := s.retryTx(ctx, func(tx *sql.Tx) error {
		copy(errs, pre)
		for _, i := range order {
			u := us[i]
			err := fencedUpdate(ctx, tx, rows[i].Args, u.Task.ID)
			switch {
			case errors.Is(err, core.ErrNotFound):
				errs[i] = fmt.Errorf("cannot update run %s: %w", u.Task.ID, err)
			case errors.Is(err, core.ErrFenced):
				errs[i] = sqlutil.FencedErr(u.Task.ID, u.Expect)
			case err != nil:
				return err
			}
		}
		return nil
	})
	if err != nil {
		sqlutil.TxFailed(errs, pre, func(i int) string { return "cannot update run " + us[i].Task.ID }, err)
		return errs
	}
	for i, u := range us {
		if errs[i] == nil {
			sqlutil.Applied(u.Task, rows[i].Row)
		}
	}
	return errs
}

// fencedUpdate runs the conditional UPDATE with args on db (the pool or a
// transaction): nil when the row matched, else core.ErrNotFound or
// core.ErrFenced.
func fencedUpdate(ctx context.Context, db execer, args []any, id string) error {
	res, err := db.ExecContext(ctx, sqlutil.UpdateTask, args...)
	if err != nil {
		return err
	}
	// id is the key and CLIENT_FOUND_ROWS is on, so one row means the swap
	// happened (even had it changed no value).
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return err
	}
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM tasks WHERE id = ?)`, id).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return core.ErrNotFound
	}
	return core.ErrFenced
}

// retryTx is inTx, run again (up to 8 times in all, after a short growing
// pause) when InnoDB chose the transaction as a deadlock victim and rolled
// it back.
func (s *Store) retryTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	var err error
	for try := 0; try < 8; try++ {
		if err = s.inTx(ctx, f); !isErr(err, errDeadlock) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(try+1) * time.Millisecond):
		}
	}
	return err
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
