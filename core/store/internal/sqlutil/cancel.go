package sqlutil

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/rlsched/rlsched/core"
)

// cancelChunk keeps IN lists well under SQLite's bound-variable limit.
const cancelChunk = 500

// CancelRecorded finishes RequestCancel after its INSERT ... SELECT (which
// each backend spells in its own dialect, ignoring a request made before):
// nothing inserted means requested before, or no such run.
func CancelRecorded(ctx context.Context, db interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, id string, res sql.Result) error {
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	var one int
	if err := db.QueryRowContext(ctx, `SELECT 1 FROM tasks WHERE id = ?`, id).Scan(&one); err != nil {
		return fmt.Errorf("cannot record the cancel of run %s: %w", id, core.ErrNotFound)
	}
	return nil
}

// CancelRequested returns which of ids have a recorded cancel request.
func CancelRequested(ctx context.Context, db Querier, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	for len(ids) > 0 {
		part := ids[:min(len(ids), cancelChunk)]
		ids = ids[len(part):]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		rows, err := db.QueryContext(ctx, `SELECT task_id FROM cancel_requests WHERE task_id IN (?`+
			strings.Repeat(",?", len(part)-1)+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("cannot read cancel requests: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("cannot read cancel requests: %w", err)
			}
			out[id] = true
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("cannot read cancel requests: %w", err)
		}
	}
	return out, nil
}
