package mysql

import (
	"context"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store/internal/sqlutil"
)

// SetPriority changes a QUEUED run's priority.
func (s *Store) SetPriority(ctx context.Context, id string, priority int) (core.Task, error) {
	if err := sqlutil.SetPriority(ctx, s.db, s.db, id, priority); err != nil {
		return core.Task{}, err
	}
	return s.Task(ctx, id)
}
