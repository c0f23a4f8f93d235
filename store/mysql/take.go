package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

// PlaceFunc decides, for queued runs handed out by TakeQueued, which to
// dispatch. It returns the new state of each run it takes (typically
// status DISPATCHED, the fence from lease.Claim, the worker and its GPU
// indices), any subset of queued in any order; runs it leaves out stay
// QUEUED. An error rolls everything back.
type PlaceFunc func(ctx context.Context, queued []core.Task) ([]core.Task, error)

// TakeQueued hands this master up to limit QUEUED runs (50 when limit is
// not positive) that no other master's TakeQueued holds, lets place decide
// which to dispatch, and writes those decisions; it returns the runs
// written, as stored.
//
// In one READ COMMITTED transaction it locks the head of the queue, in
// QueuedTasks' order, with SELECT ... FOR UPDATE SKIP LOCKED: rows another
// master holds are skipped rather than waited for, so concurrent masters
// are handed disjoint runs instead of racing for the same ones, and READ
// COMMITTED takes no gap locks, so submissions never wait on a taker. Each
// run place returns is written as UpdateTask writes it, fenced on the
// locked row's fence and QUEUED; commit then frees the runs place left.
//
// place runs while the rows are locked. It must be quick (claim leases,
// choose workers; never wait on a worker), must not write these runs
// through the Store (it would wait on its own locks), and when TakeQueued
// returns an error its caller must undo what place did outside the
// database (release the leases it claimed): nothing was written. The lease
// Claim stays the arbiter between masters that do not use TakeQueued.
//
// Needs MySQL ≥ 8.0.1 or MariaDB ≥ 10.6 (SKIP LOCKED).
func (s *Store) TakeQueued(ctx context.Context, limit int, place PlaceFunc) ([]core.Task, error) {
	if limit <= 0 {
		limit = sqlutil.DefaultLimit
	}
	var out []core.Task
	err := s.inTxOpts(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(tx *sql.Tx) error {
		queued, fences, err := lockQueued(ctx, tx, limit)
		if err != nil || len(queued) == 0 {
			return err
		}
		decided, err := place(ctx, queued)
		if err != nil {
			return err
		}
		taken := make(map[string]bool, len(decided))
		now := time.Now()
		ws := make([]sqlutil.PreparedUpdate, 0, len(decided))
		for _, d := range decided {
			fence, ok := fences[d.ID]
			if !ok || taken[d.ID] {
				return fmt.Errorf("BUG: place returned run %q, which it was not handed or returned twice", d.ID)
			}
			taken[d.ID] = true
			p, err := sqlutil.PrepareUpdate(store.Update{Task: &d, Expect: store.Expect{Fence: fence, Status: core.StatusQueued}}, now)
			if err != nil {
				return fmt.Errorf("run %s: %w", d.ID, err)
			}
			ws = append(ws, p)
			out = append(out, d)
		}
		// Locked, so every row matches: one statement for them all.
		if err := setUpdate(ctx, tx, ws); err != nil {
			return err
		}
		for i := range out {
			sqlutil.Applied(&out[i], ws[i].Row)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot take queued runs: %w", err)
	}
	return out, nil
}

// lockQueued locks up to limit QUEUED runs no other transaction holds and
// returns them in queue order with their fences. The lock is taken on tasks
// alone (MariaDB has no FOR UPDATE OF): locking the joined users row would
// make concurrent takers skip each other's users' runs. The tasks_queue
// index serves the ORDER BY, so only the rows returned are locked.
func lockQueued(ctx context.Context, tx *sql.Tx, limit int) ([]core.Task, map[string]uint64, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, fence FROM tasks WHERE status = ?
		ORDER BY priority DESC, created_at, id LIMIT ? FOR UPDATE SKIP LOCKED`,
		string(core.StatusQueued), limit)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var ids []string
	fences := map[string]uint64{}
	for rows.Next() {
		var id string
		var fence int64
		if err := rows.Scan(&id, &fence); err != nil {
			return nil, nil, err
		}
		ids = append(ids, id)
		fences[id] = uint64(fence)
	}
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return nil, nil, err
	}
	// The locked rows cannot change under us; read them whole.
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	ts, err := sqlutil.QueryTasks(ctx, tx, sqlutil.TaskCols+`WHERE t.id IN (?`+strings.Repeat(`, ?`, len(ids)-1)+`)`, args...)
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[string]core.Task, len(ts))
	for _, t := range ts {
		byID[t.ID] = t
	}
	queued := make([]core.Task, 0, len(ids))
	for _, id := range ids {
		t, ok := byID[id]
		if !ok || t.Status != core.StatusQueued || t.Fence != fences[id] {
			return nil, nil, fmt.Errorf("BUG: locked queued run %s read back as %+v", id, t)
		}
		queued = append(queued, t)
	}
	return queued, fences, nil
}
