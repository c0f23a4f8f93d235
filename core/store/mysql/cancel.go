package mysql

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
)

// RequestCancel records a cancel request of a run (idempotent). The
// INSERT ... SELECT reads the run under a shared lock, so a run deleted at
// the same moment cannot leave a dangling request.
func (s *Store) RequestCancel(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `INSERT IGNORE INTO cancel_requests (task_id, requested_at)
		SELECT id, ? FROM tasks WHERE id = ?`, time.Now().UnixNano(), id)
	if err != nil {
		return fmt.Errorf("cannot record the cancel of run %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	var one int
	if err := s.db.QueryRowContext(ctx, `SELECT 1 FROM tasks WHERE id = ?`, id).Scan(&one); err != nil {
		return fmt.Errorf("cannot record the cancel of run %s: %w", id, core.ErrNotFound)
	}
	return nil
}

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
		rows, err := s.db.QueryContext(ctx, `SELECT task_id FROM cancel_requests WHERE task_id IN (?`+
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
