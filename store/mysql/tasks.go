package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

// CreateTask inserts t as a new QUEUED run with fence 0. An empty ID gets a
// new one; zero CreatedAt/UpdatedAt become now. t.UserID must name an
// existing user (core.ErrNotFound otherwise) and t.User is set from it; a
// taken ID is core.ErrConflict. On success t looks as a later read will.
func (s *Store) CreateTasks(ctx context.Context, ts []*core.Task) []error {
	errs := make([]error, len(ts))
	pre := make([]error, len(ts))
	rows := make([]sqlutil.TaskRow, len(ts))
	names := make([]string, len(ts))
	now := time.Now()
	todo := 0
	for i, t := range ts {
		if rows[i], pre[i] = sqlutil.PrepareCreate(t, now); pre[i] == nil {
			todo++
		}
	}
	copy(errs, pre)
	if todo == 0 {
		return errs
	}
	// Users are never deleted, so the owner reads need no common
	// transaction with the INSERTs; the foreign key still refuses a
	// vanished owner.
	owners := map[int64]*string{}
	for i, t := range ts {
		if pre[i] != nil {
			continue
		}
		if _, seen := owners[t.UserID]; seen {
			continue
		}
		var name string
		err := s.db.QueryRowContext(ctx, sqlutil.SelectOwner, t.UserID).Scan(&name)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			owners[t.UserID] = nil
		case err != nil:
			sqlutil.TxFailed(errs, pre, func(i int) string { return "cannot create run " + ts[i].ID }, err)
			return errs
		default:
			owners[t.UserID] = &name
		}
	}
	// Inserted in id order (stable), as UpdateTasks does, so concurrent
	// batches meet their key locks in one order; InnoDB can still pick a
	// deadlock victim among duplicate inserts, and retryTx runs it again.
	order := make([]int, 0, todo)
	for i := range ts {
		if pre[i] == nil {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return ts[order[a]].ID < ts[order[b]].ID })
	err := s.retryTx(ctx, func(tx *sql.Tx) error {
		copy(errs, pre)
		// A failed INSERT (duplicate key, missing owner) rolls back only
		// its own statement in InnoDB; the transaction goes on.
		for _, i := range order {
			t := ts[i]
			owner := owners[t.UserID]
			if owner == nil {
				errs[i] = fmt.Errorf("cannot create run %s: owner %d: %w", t.ID, t.UserID, core.ErrNotFound)
				continue
			}
			_, err := tx.ExecContext(ctx, sqlutil.InsertTask, sqlutil.InsertArgs(t, rows[i])...)
			switch {
			case isErr(err, errDupEntry):
				errs[i] = fmt.Errorf("cannot create run %s: id taken: %w", t.ID, core.ErrConflict)
			case isErr(err, errNoReferencedRow):
				errs[i] = fmt.Errorf("cannot create run %s: owner %d: %w", t.ID, t.UserID, core.ErrNotFound)
			case err != nil:
				return err
			default:
				if err := sqlutil.InsertEdges(ctx, tx, t); err != nil {
					return err
				}
				names[i] = *owner
			}
		}
		return nil
	})
	if err != nil {
		sqlutil.TxFailed(errs, pre, func(i int) string { return "cannot create run " + ts[i].ID }, err)
		return errs
	}
	for i, t := range ts {
		if errs[i] == nil {
			t.User = names[i]
			sqlutil.Normalize(t, rows[i])
		}
	}
	return errs
}

// CreateTask is CreateTasks of one run.
func (s *Store) CreateTask(ctx context.Context, t *core.Task) error {
	return s.CreateTasks(ctx, []*core.Task{t})[0]
}

// UpdateTask writes t's mutable fields only while the row still carries
// exp's fence and status (UpdateTasks of one row): the row is read under
// its lock, so of concurrent writers from one state exactly one matches,
// and a missing row is core.ErrNotFound, another state core.ErrFenced. On
// success t.UpdatedAt is the time written.
func (s *Store) UpdateTask(ctx context.Context, t *core.Task, exp store.Expect) error {
	return s.UpdateTasks(ctx, []store.Update{{Task: t, Expect: exp}})[0]
}

// UpdateTasks applies every row as UpdateTask would, in batch order, in
// one transaction, with one statement per round of the batch (almost
// always one) instead of one per row: first optimistically, one multi-row
// fenced UPDATE (setUpdate) per round (sqlutil.Rounds), rows in id order so
// concurrent batches lock in the same order and cannot deadlock one another
// (a deadlock with some other writer is retried). A matched count equal to
// the rows means every row matched; a shorter one does not say which, so
// the transaction is rolled back and decided under locks instead
// (lockedUpdate).
func (s *Store) UpdateTasks(ctx context.Context, us []store.Update) []error {
	errs := make([]error, len(us))
	pre := make([]error, len(us))
	rows := make([]sqlutil.PreparedUpdate, len(us))
	now := time.Now()
	var ids []string
	seen := map[string]bool{}
	for i, u := range us {
		if rows[i], pre[i] = sqlutil.PrepareUpdate(u, now); pre[i] == nil && !seen[u.Task.ID] {
			seen[u.Task.ID] = true
			ids = append(ids, u.Task.ID)
		}
	}
	copy(errs, pre)
	if len(ids) == 0 {
		return errs
	}
	sort.Strings(ids)
	order := make([]int, 0, len(us))
	for i := range us {
		if pre[i] == nil {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return us[order[a]].Task.ID < us[order[b]].Task.ID })
	rounds := sqlutil.Rounds(order, func(i int) string { return us[i].Task.ID })
	err := s.retryTx(ctx, func(tx *sql.Tx) error {
		copy(errs, pre)
		for _, round := range rounds {
			ws := make([]sqlutil.PreparedUpdate, len(round))
			for k, i := range round {
				ws[k] = rows[i]
			}
			if err := setUpdate(ctx, tx, ws); err != nil {
				return err
			}
		}
		return sqlutil.ApplyCharges(ctx, tx, dialects.Usage, us, errs)
	})
	if errors.Is(err, errMissed) {
		err = s.retryTx(ctx, func(tx *sql.Tx) error {
			copy(errs, pre)
			if err := lockedUpdate(ctx, tx, us, rows, pre, errs, ids); err != nil {
				return err
			}
			return sqlutil.ApplyCharges(ctx, tx, dialects.Usage, us, errs)
		})
	}
	if err != nil {
		sqlutil.TxFailed(errs, pre, func(i int) string { return "cannot update run " + us[i].Task.ID }, err)
		return errs
	}
	for i, u := range us {
		if errs[i] == nil {
			sqlutil.Applied(u.Task, rows[i].Row)
		}
	}
	return errs
}

// errMissed is setUpdate's error when some row did not match its fence
// (or its run is missing): the transaction must not commit.
var errMissed = errors.New("some rows missed their fence")

// lockedUpdate is UpdateTasks when some row misses: one locking read of
// the batch's runs (SELECT … FOR UPDATE, in id order) decides every row's
// fence against the latest committed state, in batch order, and one
// multi-row UPDATE writes each run's last applied row, still fenced on the
// state it was read with. Two rows of one run that chain are written once:
// nothing else can see the state between them. ids are the batch's runs,
// sorted and distinct; errs gets each row's result.
func lockedUpdate(ctx context.Context, tx *sql.Tx, us []store.Update, rows []sqlutil.PreparedUpdate, pre, errs []error, ids []string) error {
	states, err := lockStates(ctx, tx, ids)
	if err != nil {
		return err
	}
	// read is each run's state as locked, cur as the rows before
	// have left it; last is the run's last row that applied.
	read := make(map[string]rowState, len(states))
	for id, st := range states {
		read[id] = st
	}
	last := map[string]int{}
	for i, u := range us {
		if pre[i] != nil {
			continue
		}
		id := u.Task.ID
		cur, ok := states[id]
		switch {
		case !ok:
			errs[i] = fmt.Errorf("cannot update run %s: %w", id, core.ErrNotFound)
		case cur.fence < 0 || uint64(cur.fence) != u.Expect.Fence || cur.status != u.Expect.Status:
			errs[i] = sqlutil.FencedErr(id, u.Expect)
		default:
			states[id] = rowState{fence: rows[i].Row.Fence, status: u.Task.Status}
			last[id] = i
		}
	}
	var writes []sqlutil.PreparedUpdate
	for _, id := range ids {
		if i, ok := last[id]; ok {
			w := rows[i]
			// The values and the id, then the state read under the lock.
			k := len(sqlutil.UpdateColumns) + 1
			w.Args = append(append([]any{}, w.Args[:k]...), read[id].fence, string(read[id].status))
			writes = append(writes, w)
		}
	}
	if err := setUpdate(ctx, tx, writes); errors.Is(err, errMissed) {
		return fmt.Errorf("BUG: runs changed under their locks: %v", err)
	} else if err != nil {
		return err
	}
	return nil
}

// rowState is what fences a run: its fence as stored, and its status.
type rowState struct {
	fence  int64
	status core.Status
}

// lockStates locks the runs ids (sorted, distinct) with one SELECT … FOR
// UPDATE per chunk and returns the state of those that exist.
func lockStates(ctx context.Context, tx *sql.Tx, ids []string) (map[string]rowState, error) {
	states := make(map[string]rowState, len(ids))
	idx := make([]int, len(ids))
	for i := range idx {
		idx[i] = i
	}
	err := sqlutil.Chunks(idx, func(chunk []int, bucket int) error {
		args := make([]any, bucket) // NULL padding matches no id
		for k, i := range chunk {
			args[k] = ids[i]
		}
		rows, err := tx.QueryContext(ctx, lockSQL[bucket], args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, status string
			var fence int64
			if err := rows.Scan(&id, &fence, &status); err != nil {
				return err
			}
			states[id] = rowState{fence: fence, status: core.Status(status)}
		}
		return rows.Err()
	})
	return states, err
}

// setUpdate writes ws, rows of distinct runs, with one multi-row UPDATE per
// chunk: a derived table of the rows in sqlutil.PreparedUpdate's argument
// order joined to tasks on id and fenced on (fence, status). When any row
// misses it returns errMissed, and the transaction must not commit.
func setUpdate(ctx context.Context, tx *sql.Tx, ws []sqlutil.PreparedUpdate) error {
	idx := make([]int, len(ws))
	for i := range idx {
		idx[i] = i
	}
	return sqlutil.Chunks(idx, func(chunk []int, bucket int) error {
		q := setUpdateSQL[bucket]
		if bucket == 1 {
			// One row: the plain fenced UPDATE. Through the derived table
			// (materialized per statement) one row took 2-4× as long
			// (BenchmarkUpdateTasks/1).
			q = sqlutil.UpdateTask
		}
		res, err := tx.ExecContext(ctx, q, sqlutil.ChunkArgs(ws, chunk, bucket)...)
		if err != nil {
			return err
		}
		// CLIENT_FOUND_ROWS: matched rows, changed or not. A run appears
		// once per statement and id is the key, so all matched or some
		// missed.
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != int64(len(chunk)) {
			return fmt.Errorf("%w: %d of %d matched", errMissed, n, len(chunk))
		}
		return nil
	})
}

// lockSQL and setUpdateSQL are lockStates' and setUpdate's statements by
// bucket size. Parameters are interpolated client-side (Open), so there is
// no server-side statement to prepare; the texts are built once.
var lockSQL, setUpdateSQL = func() (lock, set map[int]string) {
	lock, set = map[int]string{}, map[int]string{}
	cols := append(slices.Clone(sqlutil.UpdateColumns), "id", "exp_fence", "exp_status")
	first := "SELECT ? AS " + strings.Join(cols, ", ? AS ")
	next := " UNION ALL SELECT ?" + strings.Repeat(", ?", sqlutil.UpdateArgs-1)
	var assign []string
	for _, c := range sqlutil.UpdateColumns {
		assign = append(assign, "t."+c+" = v."+c)
	}
	for _, n := range sqlutil.Buckets {
		lock[n] = `SELECT id, fence, status FROM tasks FORCE INDEX (PRIMARY) WHERE id IN (?` + strings.Repeat(`, ?`, n-1) + `) FOR UPDATE`
		// The derived table drives and each run is found by its key:
		// left to itself the optimizer may scan tasks, which would lock
		// every run (TestSetUpdatePlan).
		set[n] = `UPDATE (` + first + strings.Repeat(next, n-1) + `) v
			STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY)
			ON t.id = v.id AND t.fence = v.exp_fence AND t.status = v.exp_status
			SET ` + strings.Join(assign, ", ")
	}
	return lock, set
}()

// retryTx is inTx, run again (up to 8 times in all, after a short growing
// pause) when InnoDB chose the transaction as a deadlock victim and rolled
// it back.
func (s *Store) retryTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	var err error
	for try := 0; try < 8; try++ {
		if err = s.inTx(ctx, f); !isErr(err, errDeadlock) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(try+1) * time.Millisecond):
		}
	}
	return err
}
