package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

// CreateSweep implements store.Store: the sweep, its members' runs and the
// members in one IMMEDIATE transaction. Any row that fails rolls all back.
func (s *Store) CreateSweep(ctx context.Context, sw *store.Sweep, members []*core.Task) error {
	sargs, rows, err := sqlutil.PrepareSweep(sw, members, time.Now())
	if err != nil {
		return err
	}
	var owner string
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		sel, err := s.ws.inTx(ctx, tx, sqlutil.SelectOwner)
		if err != nil {
			return err
		}
		if owner, err = sqlutil.SweepOwner(sel.QueryRowContext(ctx, sw.UserID), sw.UserID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlutil.InsertSweep, sargs...); isUnique(err) {
			return fmt.Errorf("id taken: %w", core.ErrConflict)
		} else if err != nil {
			return err
		}
		ins, err := s.ws.inTx(ctx, tx, sqlutil.InsertTask)
		if err != nil {
			return err
		}
		defer ins.Close()
		for i, t := range members {
			if _, err := ins.ExecContext(ctx, sqlutil.InsertArgs(t, rows[i])...); isUnique(err) {
				return fmt.Errorf("member %d: run id %s taken: %w", i, t.ID, core.ErrConflict)
			} else if err != nil {
				return err
			}
			if err := sqlutil.InsertEdges(ctx, tx, t); err != nil {
				return err
			}
		}
		return sqlutil.InsertMembers(ctx, tx, sw.ID, members, 0)
	})
	if err != nil {
		return fmt.Errorf("cannot create sweep %s: %w", sw.ID, err)
	}
	sqlutil.SweepCreated(sw, members, rows, owner)
	return nil
}

// RetrySweep implements store.Store. The transaction is IMMEDIATE, so the
// latest runs it reads cannot change before it moves the members.
func (s *Store) RetrySweep(ctx context.Context, id string, rerun func(core.Task) core.Task) ([]core.Task, error) {
	var created []*core.Task
	var rows []sqlutil.TaskRow
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		created, rows = nil, nil
		ms, err := sqlutil.LatestRuns(ctx, tx, id, core.SweepRetried()...)
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			return nil
		}
		ins, err := s.ws.inTx(ctx, tx, sqlutil.InsertTask)
		if err != nil {
			return err
		}
		defer ins.Close()
		now := time.Now()
		for _, m := range ms {
			nt, r, err := sqlutil.PrepareRetry(id, m, rerun, now)
			if err != nil {
				return err
			}
			if _, err := ins.ExecContext(ctx, sqlutil.InsertArgs(nt, r)...); isUnique(err) {
				return fmt.Errorf("cannot retry member %d of sweep %s: run id %s taken: %w", m.Index, id, nt.ID, core.ErrConflict)
			} else if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, sqlutil.MoveMember, nt.ID, id, m.Index, m.Task.ID); err != nil {
				return err
			}
			nt.User = m.Task.User
			created, rows = append(created, nt), append(rows, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot retry sweep %s: %w", id, err)
	}
	return sqlutil.Retried(created, rows), nil
}

// AddSweepMembers implements store.Store in one IMMEDIATE transaction: the
// compare-and-swap on the member count first, so a loser writes nothing.
func (s *Store) AddSweepMembers(ctx context.Context, id string, from int, members []*core.Task) error {
	var rows []sqlutil.TaskRow
	var owner string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if rows, owner, err = sqlutil.GrowTx(ctx, tx, id, from, members, time.Now()); err != nil {
			return err
		}
		ins, err := s.ws.inTx(ctx, tx, sqlutil.InsertTask)
		if err != nil {
			return err
		}
		defer ins.Close()
		for i, t := range members {
			if _, err := ins.ExecContext(ctx, sqlutil.InsertArgs(t, rows[i])...); isUnique(err) {
				return fmt.Errorf("member %d: run id %s taken: %w", from+i, t.ID, core.ErrConflict)
			} else if err != nil {
				return err
			}
		}
		return sqlutil.InsertMembers(ctx, tx, id, members, from)
	})
	if err != nil {
		return fmt.Errorf("cannot add members to sweep %s: %w", id, err)
	}
	sqlutil.SweepCreated(&store.Sweep{}, members, rows, owner)
	return nil
}
