package sqlite

import (
	"context"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

// queueQueries are sqlutil.FairQueue's on the partial indexes of QUEUED
// runs: tasks_queued (migration 3) for the window, tasks_queued_groups
// (migration 13) for the groups. The status is a literal, since a partial
// index serves only a query whose WHERE names its condition, and the
// indexes are named, since without statistics the planner prefers the
// equality on tasks_status_newest and a sort (TestQueueIndex).
var queueQueries = sqlutil.NewQueueQueries("FROM tasks t INDEXED BY tasks_queued", "FROM tasks t INDEXED BY tasks_queued_groups")

// QueuedTasks implements store.Store, on the read pool, prepared once.
func (s *Store) QueuedTasks(ctx context.Context, limit int) ([]core.Task, error) {
	return sqlutil.FairQueue(ctx, s.rs, queueQueries, limit)
}
