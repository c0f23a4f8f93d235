package mysql

import (
	"context"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

// QueuedTasks implements store.Store. It is a plain read, safe for any
// number of masters at once; it reserves nothing. A master that dispatches
// from it claims each run with lease.Claim (the arbiter) and then moves it
// with UpdateTask from (its fence, QUEUED) (the durable guard), releasing
// the lease on core.ErrFenced.
func (s *Store) QueuedTasks(ctx context.Context, limit int) ([]core.Task, error) {
	return sqlutil.FairQueue(ctx, s.db, queueQueries, limit)
}

// queueQueries are sqlutil.FairQueue's on the queue's indexes of runs not
// waiting on a dependency: tasks_ready for the window, tasks_ready_groups
// for the groups (migration 15).
var queueQueries = sqlutil.NewQueueQueries("FROM tasks t FORCE INDEX (tasks_ready)", "FROM tasks t FORCE INDEX (tasks_ready_groups)")
