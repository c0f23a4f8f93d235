package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core/store/internal/sqlutil"
)

// RequestCancel records a cancel request of a run (idempotent).
func (s *Store) RequestCancel(ctx context.Context, id string) error {
	res, err := s.w.ExecContext(ctx, `INSERT INTO cancel_requests(task_id, requested_at)
		SELECT id, ? FROM tasks WHERE id = ? ON CONFLICT(task_id) DO NOTHING`, time.Now().UnixNano(), id)
	if err != nil {
		return fmt.Errorf("cannot record the cancel of run %s: %w", id, err)
	}
	return sqlutil.CancelRecorded(ctx, s.r, id, res)
}

// CancelRequested returns which of ids have a recorded cancel request.
func (s *Store) CancelRequested(ctx context.Context, ids []string) (map[string]bool, error) {
	return sqlutil.CancelRequested(ctx, s.r, ids)
}
