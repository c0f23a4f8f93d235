package sqlutil

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
)

// cancelChunk keeps IN lists well under SQLite's bound-variable limit.
const cancelChunk = 500

// RequestCancel records a cancel request of a run (idempotent). Nothing
// inserted means requested before, or no such run.
func (s *Shared) RequestCancel(ctx context.Context, id string) error {
	res, err := s.c.Write.ExecContext(ctx, s.d.RequestCancel, time.Now().UnixNano(), id)
	if err != nil {
		return fmt.Errorf("cannot record the cancel of run %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	var one int
	if err := s.c.Read.QueryRowContext(ctx, `SELECT 1 FROM tasks WHERE id = ?`, id).Scan(&one); err != nil {
		return fmt.Errorf("cannot record the cancel of run %s: %w", id, core.ErrNotFound)
	}
	return nil
}

// CancelRequested returns which of ids have a recorded cancel request.
func (s *Shared) CancelRequested(ctx context.Context, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	for len(ids) > 0 {
		part := ids[:min(len(ids), cancelChunk)]
		ids = ids[len(part):]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		rows, err := s.c.Read.QueryContext(ctx, `SELECT task_id FROM cancel_requests WHERE task_id IN (?`+
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
