package mysql

import (
	"context"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core/store/internal/sqlutil"
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
	return sqlutil.CancelRecorded(ctx, s.db, id, res)
}

// CancelRequested returns which of ids have a recorded cancel request.
func (s *Store) CancelRequested(ctx context.Context, ids []string) (map[string]bool, error) {
	return sqlutil.CancelRequested(ctx, s.db, ids)
}
