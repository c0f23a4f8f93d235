package sqlite

import (
	"context"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store/internal/sqlutil"
)

// SetPriority changes a QUEUED run's priority.
func (s *Store) SetPriority(ctx context.Context, id string, priority int) (core.Task, error) {
	// The check reads through the writer: a read connection may not see
	// the write's outcome yet.
	if err := sqlutil.SetPriority(ctx, s.w, s.w, id, priority); err != nil {
		return core.Task{}, err
	}
	return s.Task(ctx, id)
}
