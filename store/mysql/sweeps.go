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

// tasksPerInsert bounds the rows of one multi-row INSERT of runs: 30
// columns each, far below the 65,535 placeholders and max_allowed_packet.
const tasksPerInsert = 200

// CreateSweep implements store.Store: the sweep, its members' runs (in
// multi-row INSERTs) and the members in one transaction, retried on a
// deadlock. Any row that fails rolls all back.
func (s *Store) CreateSweep(ctx context.Context, sw *store.Sweep, members []*core.Task) error {
	sargs, rows, err := sqlutil.PrepareSweep(sw, members, time.Now())
	if err != nil {
		return err
	}
	var owner string
	err = s.retryTx(ctx, func(tx *sql.Tx) error {
		var err error
		if owner, err = sqlutil.SweepOwner(tx.QueryRowContext(ctx, sqlutil.SelectOwner, sw.UserID), sw.UserID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlutil.InsertSweep, sargs...); err != nil {
			return err
		}
		if err := insertTasks(ctx, tx, members, rows); err != nil {
			return err
		}
		return sqlutil.InsertMembers(ctx, tx, sw.ID, members, 0)
	})
	switch {
	case isErr(err, errDupEntry):
		return fmt.Errorf("cannot create sweep %s: an id is taken: %w", sw.ID, core.ErrConflict)
	case isErr(err, errNoReferencedRow):
		return fmt.Errorf("cannot create sweep %s: owner %d: %w", sw.ID, sw.UserID, core.ErrNotFound)
	case err != nil:
		return fmt.Errorf("cannot create sweep %s: %w", sw.ID, err)
	}
	sqlutil.SweepCreated(sw, members, rows, owner)
	return nil
}

// insertTasks inserts ts (encoded as rows) in multi-row INSERTs.
func insertTasks(ctx context.Context, tx *sql.Tx, ts []*core.Task, rows []sqlutil.TaskRow) error {
	for start := 0; start < len(ts); start += tasksPerInsert {
		end := min(len(ts), start+tasksPerInsert)
		args := make([]any, 0, 30*(end-start))
		for i := start; i < end; i++ {
			args = append(args, sqlutil.InsertArgs(ts[i], rows[i])...)
		}
		q := sqlutil.InsertTask + strings.Repeat(sqlutil.InsertTaskValues, end-start-1)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	for _, t := range ts {
		if err := sqlutil.InsertEdges(ctx, tx, t); err != nil {
			return err
		}
	}
	return nil
}

// RetrySweep implements store.Store. Of two retries at once, both may read
// a member's FAILED run, but the compare-and-swap on the member's latest
// run (sqlutil.MoveMember, under InnoDB's row lock, on the latest committed
// row) matches for one of them only; the other leaves the member alone.
func (s *Store) RetrySweep(ctx context.Context, id string, rerun func(core.Task) core.Task) ([]core.Task, error) {
	var created []*core.Task
	var rows []sqlutil.TaskRow
	err := s.retryTx(ctx, func(tx *sql.Tx) error {
		created, rows = nil, nil
		ms, err := sqlutil.LatestRuns(ctx, tx, id, core.SweepRetried()...)
		if err != nil {
			return err
		}
		now := time.Now()
		for _, m := range ms {
			nt, r, err := sqlutil.PrepareRetry(id, m, rerun, now)
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, sqlutil.MoveMember, nt.ID, id, m.Index, m.Task.ID)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n != 1 {
				continue // another retry moved it first
			}
			nt.User = m.Task.User
			created, rows = append(created, nt), append(rows, r)
		}
		return insertTasks(ctx, tx, created, rows)
	})
	if isErr(err, errDupEntry) {
		return nil, fmt.Errorf("cannot retry sweep %s: a run id is taken: %w", id, core.ErrConflict)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot retry sweep %s: %w", id, err)
	}
	return sqlutil.Retried(created, rows), nil
}

// AddSweepMembers implements store.Store in one transaction, retried on a
// deadlock: the compare-and-swap on the member count (under InnoDB's row
// lock) first, so a loser writes nothing.
func (s *Store) AddSweepMembers(ctx context.Context, id string, from int, members []*core.Task) error {
	var rows []sqlutil.TaskRow
	var owner string
	err := s.retryTx(ctx, func(tx *sql.Tx) error {
		var err error
		if rows, owner, err = sqlutil.GrowTx(ctx, tx, id, from, members, time.Now()); err != nil {
			return err
		}
		if err := insertTasks(ctx, tx, members, rows); err != nil {
			return err
		}
		return sqlutil.InsertMembers(ctx, tx, id, members, from)
	})
	if isErr(err, errDupEntry) {
		return fmt.Errorf("cannot add members to sweep %s: a run id is taken: %w", id, core.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("cannot add members to sweep %s: %w", id, err)
	}
	sqlutil.SweepCreated(&store.Sweep{}, members, rows, owner)
	return nil
}
