package sqlite

import (
	"context"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
	"github.com/rlsched/rlsched/core/store/internal/sqlutil"
)

// The read queries are sqlutil's, shared with the mysql backend; they run
// on the read pool, prepared once.

// ListTasks implements store.Store.
func (s *Store) ListTasks(ctx context.Context, f store.Filter) ([]core.Task, string, error) {
	return sqlutil.ListTasks(ctx, s.rs, f)
}

// QueuedTasks implements store.Store.
func (s *Store) QueuedTasks(ctx context.Context, limit int) ([]core.Task, error) {
	return sqlutil.QueuedTasks(ctx, s.rs, limit)
}

// ActiveTasks implements store.Store.
func (s *Store) ActiveTasks(ctx context.Context) ([]core.Task, error) {
	return sqlutil.ActiveTasks(ctx, s.rs)
}

// CountByStatus implements store.Store.
func (s *Store) CountByStatus(ctx context.Context) (map[core.Status]int, error) {
	return sqlutil.CountByStatus(ctx, s.rs)
}
