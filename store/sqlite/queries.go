package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

// queuedTasks is sqlutil.QueuedTasks' query on the partial index of
// QUEUED runs (tasks_queued, migration 3): the status is a literal, since a
// partial index serves only a query whose WHERE names its condition, and
// the index is named, since without statistics the planner prefers the
// equality on tasks_status_newest and a sort (TestQueueIndex).
var queuedTasks = strings.Replace(sqlutil.TaskCols, "FROM tasks t ", "FROM tasks t INDEXED BY tasks_queued ", 1) +
	`WHERE t.status = 'QUEUED' ORDER BY t.priority DESC, t.created_at, t.id LIMIT ?`

// QueuedTasks implements store.Store, on the read pool, prepared once.
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
