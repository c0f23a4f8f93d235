package sqlutil

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
)

// Execer runs a statement: the writer pool or a transaction.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// RowQuerier reads one row.
type RowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SetPriority changes a QUEUED run's priority (store.Scheduling); w writes,
// r tells an unknown run (core.ErrNotFound) from one that left the queue
// (core.ErrConflict).
func SetPriority(ctx context.Context, w Execer, r RowQuerier, id string, priority int) error {
	res, err := w.ExecContext(ctx, `UPDATE tasks SET priority = ?, updated_at = ? WHERE id = ? AND status = 'QUEUED'`,
		priority, time.Now().UnixNano(), id)
	if err != nil {
		return fmt.Errorf("cannot set the priority of run %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	var status string
	err = r.QueryRowContext(ctx, `SELECT status FROM tasks WHERE id = ?`, id).Scan(&status)
	switch {
	case err == sql.ErrNoRows:
		return fmt.Errorf("cannot set the priority of run %s: %w", id, core.ErrNotFound)
	case err != nil:
		return fmt.Errorf("cannot set the priority of run %s: %w", id, err)
	}
	return fmt.Errorf("cannot set the priority of run %s: it is %s, not QUEUED: %w", id, status, core.ErrConflict)
}
