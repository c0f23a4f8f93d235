package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
	"github.com/rlsched/rlsched/core/store/internal/sqlutil"
)

// The read queries are sqlutil's, shared with the mysql backend; they run
// on the read pool, prepared once.

// ListTasks implements store.Store.
func (s *Store) ListTasks(ctx context.Context, f store.Filter) ([]core.Task, string, error) {
	return sqlutil.ListTasks(ctx, s.rs, f, dialect)
}

// queuedTasks is sqlutil.QueuedTasks' query on the partial index of
// QUEUED runs (tasks_queued, migration 3): the status is a literal, since a
// partial index serves only a query whose WHERE names its condition, and
// the index is named, since without statistics the planner prefers the
// equality on tasks_status_newest and a sort (TestQueueIndex).
var queuedTasks = strings.Replace(sqlutil.TaskCols, "FROM tasks t ", "FROM tasks t INDEXED BY tasks_queued ", 1) +
	`WHERE t.status = 'QUEUED' ORDER BY t.priority DESC, t.created_at, t.id LIMIT ?`

// QueuedTasks implements store.Store.
func (s *Store) QueuedTasks(ctx context.Context, limit int) ([]core.Task, error) {
	if limit <= 0 {
		limit = sqlutil.DefaultLimit
	}
	ts, err := sqlutil.QueryTasks(ctx, s.rs, queuedTasks, limit)
	if err != nil {
		return nil, fmt.Errorf("cannot list queued runs: %w", err)
	}
	return ts, nil
}

// ActiveTasks implements store.Store.
func (s *Store) ActiveTasks(ctx context.Context) ([]core.Task, error) {
	return sqlutil.ActiveTasks(ctx, s.rs)
}

// CountByStatus implements store.Store.
func (s *Store) CountByStatus(ctx context.Context) (map[core.Status]int, error) {
	return sqlutil.CountByStatus(ctx, s.rs)
}
