package sqlutil

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/rlsched/rlsched/core"
)

// QueueQueries are a dialect's statements of the fair window (FairQueue),
// each on the QUEUED runs not waiting on a dependency (core.Task.Waiting:
// the literal condition is the queue's indexes' own, so a waiting run is
// never read): Plain is TaskCols in queue order with a LIMIT;
// Groups lists the distinct (user_id, sweep_id) of the queue; Group is
// TaskCols of one group in queue order with a LIMIT and an OFFSET.
type QueueQueries struct{ Plain, Groups, Group string }

// NewQueueQueries builds them on a dialect's FROM clauses (index hints):
// queue for Plain (TaskCols' "FROM tasks t " replaced), groups for Group
// and, without the alias, Groups.
func NewQueueQueries(queue, groups string) QueueQueries {
	const order = ` ORDER BY t.priority DESC, t.created_at, t.id`
	return QueueQueries{
		Plain:  strings.Replace(TaskCols, "FROM tasks t ", queue+" ", 1) + `WHERE t.status = 'QUEUED' AND t.waiting = 0` + order + ` LIMIT ?`,
		Groups: `SELECT DISTINCT user_id, sweep_id ` + strings.Replace(groups, "tasks t", "tasks", 1) + ` WHERE status = 'QUEUED' AND waiting = 0`,
		Group: strings.Replace(TaskCols, "FROM tasks t ", groups+" ", 1) +
			`WHERE t.status = 'QUEUED' AND t.waiting = 0 AND t.user_id = ? AND t.sweep_id = ?` + order + ` LIMIT ? OFFSET ?`,
	}
}

// FairQueue is store.Store.QueuedTasks: up to limit QUEUED runs (DefaultLimit
// when limit is not positive) in queue order (priority, higher first, then
// oldest, then id). When more than limit are queued, the window is fair by
// construction: each group of runs of one owner and one sweep (or none)
// gets an equal share of it, the share of a group with fewer runs going to
// the others, each group's runs taken in its own queue order. A window in
// plain queue order let a few thousand older runs that cannot start (too
// large, held by their owner's quota or their sweep's cap) hide every later
// run of every user (issue 25).
//
// Its cost is one read when the queue fits the window (the common case),
// else a scan of the queue's (owner, sweep) index and one short read per
// group per round, rounds ending when the window is full or every group is
// exhausted.
func FairQueue(ctx context.Context, db Querier, q QueueQueries, limit int) ([]core.Task, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	plain, err := QueryTasks(ctx, db, q.Plain, limit+1)
	if err != nil {
		return nil, fmt.Errorf("cannot list queued runs: %w", err)
	}
	if len(plain) <= limit {
		return plain, nil
	}
	type group struct {
		user    int64
		sweep   string
		fetched int
		done    bool
	}
	rows, err := db.QueryContext(ctx, q.Groups)
	if err != nil {
		return nil, fmt.Errorf("cannot list the queue's owners: %w", err)
	}
	var groups []*group
	for rows.Next() {
		g := &group{}
		if err := rows.Scan(&g.user, &g.sweep); err != nil {
			rows.Close()
			return nil, fmt.Errorf("cannot list the queue's owners: %w", err)
		}
		groups = append(groups, g)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot list the queue's owners: %w", err)
	}
	if len(groups) <= 1 {
		return plain[:limit], nil // one group: its own order is the queue's
	}
	out := make([]core.Task, 0, limit)
	for open := len(groups); len(out) < limit && open > 0; {
		share := max(1, (limit-len(out))/open) // rounded down: every open group gets as many as the next
		for _, g := range groups {
			if g.done || len(out) >= limit {
				continue
			}
			n := min(share, limit-len(out))
			ts, err := QueryTasks(ctx, db, q.Group, g.user, g.sweep, n, g.fetched)
			if err != nil {
				return nil, fmt.Errorf("cannot list queued runs: %w", err)
			}
			g.fetched += len(ts)
			out = append(out, ts...)
			if len(ts) < n {
				g.done = true
				open--
			}
		}
	}
	slices.SortFunc(out, func(a, b core.Task) int {
		switch {
		case core.QueueBefore(&a, &b):
			return -1
		case core.QueueBefore(&b, &a):
			return 1
		}
		return 0
	})
	return out, nil
}
