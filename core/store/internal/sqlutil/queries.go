package sqlutil

import (
	"context"
	"fmt"
	"strings"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
)

// ListTasks returns one page of runs, newest first (created_at DESC, id
// DESC), and the cursor of the next page ("" after the last). The cursor is
// a keyset position, so rows created between pages neither repeat nor shift
// the rest. A malformed cursor wraps store.ErrBadCursor.
func ListTasks(ctx context.Context, db Querier, f store.Filter) ([]core.Task, string, error) {
	var where []string
	var args []any
	if f.Status != "" {
		where, args = append(where, "t.status = ?"), append(args, string(f.Status))
	}
	if f.User != "" {
		where, args = append(where, "u.username = ?"), append(args, f.User)
	}
	if f.Project != "" {
		where, args = append(where, "t.project = ?"), append(args, f.Project)
	}
	if f.Cursor != "" {
		at, id, err := DecodeCursor(f.Cursor)
		if err != nil {
			return nil, "", fmt.Errorf("cannot list runs: %w", err)
		}
		// Spelled out rather than as a row-value comparison so that the
		// (created_at DESC, id DESC) indexes serve it.
		where = append(where, "(t.created_at < ? OR (t.created_at = ? AND t.id < ?))")
		args = append(args, at, at, id)
	}
	q := TaskCols
	if len(where) > 0 {
		q += "WHERE " + strings.Join(where, " AND ")
	}
	limit := Limit(f.Limit)
	// One row more than asked tells whether another page exists.
	q += " ORDER BY t.created_at DESC, t.id DESC LIMIT ?"
	args = append(args, limit+1)
	ts, err := QueryTasks(ctx, db, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("cannot list runs: %w", err)
	}
	if len(ts) <= limit {
		return ts, "", nil
	}
	ts = ts[:limit]
	last := ts[limit-1]
	return ts, EncodeCursor(last.CreatedAt.UnixNano(), last.ID), nil
}

// QueuedTasks returns up to limit QUEUED runs (50 when limit is not
// positive), highest priority first, then oldest, then lowest id.
func QueuedTasks(ctx context.Context, db Querier, limit int) ([]core.Task, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	ts, err := QueryTasks(ctx, db, TaskCols+`WHERE t.status = ?
		ORDER BY t.priority DESC, t.created_at, t.id LIMIT ?`, string(core.StatusQueued), limit)
	if err != nil {
		return nil, fmt.Errorf("cannot list queued runs: %w", err)
	}
	return ts, nil
}

// ActiveTasks returns every DISPATCHED or RUNNING run, oldest first.
func ActiveTasks(ctx context.Context, db Querier) ([]core.Task, error) {
	ts, err := QueryTasks(ctx, db, TaskCols+`WHERE t.status IN (?, ?) ORDER BY t.created_at, t.id`,
		string(core.StatusDispatched), string(core.StatusRunning))
	if err != nil {
		return nil, fmt.Errorf("cannot list active runs: %w", err)
	}
	return ts, nil
}

// allStatuses are reported by CountByStatus even at zero, so callers (the
// health page) can range over the map without knowing the list.
var allStatuses = []core.Status{
	core.StatusQueued, core.StatusDispatched, core.StatusRunning, core.StatusSucceeded,
	core.StatusFailed, core.StatusCancelled, core.StatusTimeout, core.StatusLost,
}

// CountByStatus returns the number of runs in each known status, zeros included.
func CountByStatus(ctx context.Context, db Querier) (map[core.Status]int, error) {
	rows, err := db.QueryContext(ctx, `SELECT status, COUNT(*) FROM tasks GROUP BY status`)
	if err != nil {
		return nil, fmt.Errorf("cannot count runs: %w", err)
	}
	defer rows.Close()
	out := make(map[core.Status]int, len(allStatuses))
	for _, st := range allStatuses {
		out[st] = 0
	}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("cannot count runs: %w", err)
		}
		out[core.Status(st)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot count runs: %w", err)
	}
	return out, nil
}
