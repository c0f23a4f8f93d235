package sqlite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
)

// RequestCancel records a cancel request of a run (idempotent).
func (s *Store) RequestCancel(ctx context.Context, id string) error {
	res, err := s.w.ExecContext(ctx, `INSERT INTO cancel_requests(task_id, requested_at)
		SELECT id, ? FROM tasks WHERE id = ? ON CONFLICT(task_id) DO NOTHING`, time.Now().UnixNano(), id)
	if err != nil {
		return fmt.Errorf("cannot record the cancel of run %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	// Nothing inserted: requested before, or no such run.
	var one int
	if err := s.r.QueryRowContext(ctx, `SELECT 1 FROM tasks WHERE id = ?`, id).Scan(&one); err != nil {
		return fmt.Errorf("cannot record the cancel of run %s: %w", id, core.ErrNotFound)
	}
	return nil
}

// cancelChunk keeps IN lists well under SQLite's bound-variable limit.
const cancelChunk = 500

// CancelRequested returns which of ids have a recorded cancel request.
func (s *Store) CancelRequested(ctx context.Context, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	for len(ids) > 0 {
		n := min(len(ids), cancelChunk)
		part := ids[:n]
		ids = ids[n:]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		rows, err := s.r.QueryContext(ctx, `SELECT task_id FROM cancel_requests WHERE task_id IN (?`+
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
