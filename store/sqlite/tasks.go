package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

var (
	_ store.Store      = (*Store)(nil)
	_ store.TaskWriter = (*Store)(nil)
)

// writeStmts are the writes prepared once on the writer connection: the
// set-based update of every bucket size among them.
var writeStmts = append([]string{sqlutil.SelectOwner, sqlutil.UpdateFinalReward, sqlutil.InsertTask, sqlutil.UpdateTask,
	sqlutil.UsageUserKnown, sqlutil.UsageWrite, dialects.Usage.Ensure, dialects.Usage.Lock}, setUpdates()...)

// setUpdate is UpdateTask for n rows in one statement: VALUES rows in
// sqlutil.PreparedUpdate's argument order joined to tasks on id and
// fenced per row on (fence, status); RETURNING names the rows that matched
// their fence, the others are left as they were. A run must appear at most
// once in one statement (sqlutil.Rounds): SQLite picks an arbitrary VALUES
// row when several match the same target.
func setUpdate(n int) string {
	row := "(?" + strings.Repeat(",?", sqlutil.UpdateArgs-1) + ")"
	set := make([]string, len(sqlutil.UpdateColumns))
	for i, c := range sqlutil.UpdateColumns {
		set[i] = fmt.Sprintf("%s = v.column%d", c, i+1)
	}
	k := len(set)
	return `UPDATE tasks SET ` + strings.Join(set, ", ") + `
	FROM (VALUES ` + row + strings.Repeat(","+row, n-1) + `) AS v
	WHERE ` + fmt.Sprintf("tasks.id = v.column%d AND tasks.fence = v.column%d AND tasks.status = v.column%d", k+1, k+2, k+3) + `
	RETURNING tasks.id`
}

// setUpdates are setUpdate of every bucket, in sqlutil.Buckets' order.
func setUpdates() []string {
	qs := make([]string, len(sqlutil.Buckets))
	for i, n := range sqlutil.Buckets {
		qs[i] = setUpdate(n)
	}
	return qs
}

// setUpdateSQL is setUpdates by bucket size, built once.
var setUpdateSQL = func() map[int]string {
	m := map[int]string{}
	for i, q := range setUpdates() {
		m[sqlutil.Buckets[i]] = q
	}
	return m
}()

// CreateTask inserts t as a new QUEUED run with fence 0. An empty ID gets a
// new one; zero CreatedAt/UpdatedAt become now. t.UserID must name an
// existing user (core.ErrNotFound otherwise) and t.User is set from it; a
// taken ID is core.ErrConflict. On success t looks as a later read will.
func (s *Store) CreateTask(ctx context.Context, t *core.Task) error {
	return s.CreateTasks(ctx, []*core.Task{t})[0]
}

// CreateTasks inserts ts in one transaction. A failed INSERT (a taken id)
// rolls back only its own statement in SQLite, so the other rows still
// commit; owners are checked before inserting.
func (s *Store) CreateTasks(ctx context.Context, ts []*core.Task) []error {
	cerrs, _ := s.WriteTasks(ctx, ts, nil)
	return cerrs
}

// WriteTasks is CreateTasks(creates) then UpdateTasks(updates) in one
// transaction (store.TaskWriter): the Batcher commits the submissions and
// the run changes that wait at the same time with one fsync.
func (s *Store) WriteTasks(ctx context.Context, creates []*core.Task, updates []store.Update) (cerrs, uerrs []error) {
	c := newCreateBatch(creates)
	u := newUpdateBatch(updates)
	if c.todo == 0 && u.todo == 0 {
		return c.errs, u.errs
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.createInTx(ctx, tx, creates, c); err != nil {
			return err
		}
		if err := s.updateInTx(ctx, tx, updates, u); err != nil {
			return err
		}
		return sqlutil.ApplyCharges(ctx, preparedTx{tx, s.ws}, dialects.Usage, updates, u.errs)
	})
	if err != nil {
		sqlutil.TxFailed(c.errs, c.pre, func(i int) string { return "cannot create run " + creates[i].ID }, err)
		sqlutil.TxFailed(u.errs, u.pre, func(i int) string { return "cannot update run " + updates[i].Task.ID }, err)
		return c.errs, u.errs
	}
	for i, t := range creates {
		if c.errs[i] == nil {
			t.User = c.names[i]
			sqlutil.Normalize(t, c.rows[i])
		}
	}
	for i, up := range updates {
		if u.errs[i] == nil {
			sqlutil.Applied(up.Task, u.rows[i].Row)
		}
	}
	return c.errs, u.errs
}

// createBatch is the state of CreateTasks' rows: pre their errors before
// the transaction, errs their results.
type createBatch struct {
	errs, pre []error
	rows      []sqlutil.TaskRow
	names     []string
	todo      int
}

func newCreateBatch(ts []*core.Task) *createBatch {
	c := &createBatch{errs: make([]error, len(ts)), pre: make([]error, len(ts)),
		rows: make([]sqlutil.TaskRow, len(ts)), names: make([]string, len(ts))}
	now := time.Now()
	for i, t := range ts {
		if c.rows[i], c.pre[i] = sqlutil.PrepareCreate(t, now); c.pre[i] == nil {
			c.todo++
		}
	}
	copy(c.errs, c.pre)
	return c
}

// createInTx inserts the rows of c without an error yet.
func (s *Store) createInTx(ctx context.Context, tx *sql.Tx, ts []*core.Task, c *createBatch) error {
	if c.todo == 0 {
		return nil
	}
	owners := map[int64]*string{}
	var ins *sql.Stmt
	for i, t := range ts {
		if c.pre[i] != nil {
			continue
		}
		owner, seen := owners[t.UserID]
		if !seen {
			var name string
			sel, err := s.ws.inTx(ctx, tx, sqlutil.SelectOwner)
			if err != nil {
				return err
			}
			err = sel.QueryRowContext(ctx, t.UserID).Scan(&name)
			switch {
			case errors.Is(err, sql.ErrNoRows):
			case err != nil:
				return err
			default:
				owner = &name
			}
			owners[t.UserID] = owner
		}
		if owner == nil {
			c.errs[i] = fmt.Errorf("cannot create run %s: owner %d: %w", t.ID, t.UserID, core.ErrNotFound)
			continue
		}
		if ins == nil {
			var err error
			if ins, err = s.ws.inTx(ctx, tx, sqlutil.InsertTask); err != nil {
				return err
			}
			defer ins.Close()
		}
		_, err := ins.ExecContext(ctx, sqlutil.InsertArgs(t, c.rows[i])...)
		if isUnique(err) {
			c.errs[i] = fmt.Errorf("cannot create run %s: id taken: %w", t.ID, core.ErrConflict)
			continue
		}
		if err != nil {
			return err
		}
		if err := sqlutil.InsertEdges(ctx, tx, t); err != nil {
			return err
		}
		c.names[i] = *owner
	}
	return nil
}

// UpdateTask writes t's mutable fields in one conditional UPDATE: the row
// changes only while it still carries exp's fence and status. When nothing
// matched, a look inside the same transaction tells core.ErrNotFound from
// core.ErrFenced. On success t.UpdatedAt is the time written.
func (s *Store) UpdateTask(ctx context.Context, t *core.Task, exp store.Expect) error {
	return s.UpdateTasks(ctx, []store.Update{{Task: t, Expect: exp}})[0]
}

// UpdateTasks runs UpdateTask's conditional UPDATE for every row, in order,
// in one transaction: one commit (and one fsync) for the whole batch.
func (s *Store) UpdateTasks(ctx context.Context, us []store.Update) []error {
	_, uerrs := s.WriteTasks(ctx, nil, us)
	return uerrs
}

// updateBatch is the state of UpdateTasks' rows, as createBatch.
type updateBatch struct {
	errs, pre []error
	rows      []sqlutil.PreparedUpdate
	todo      int
}

func newUpdateBatch(us []store.Update) *updateBatch {
	u := &updateBatch{errs: make([]error, len(us)), pre: make([]error, len(us)), rows: make([]sqlutil.PreparedUpdate, len(us))}
	now := time.Now()
	for i, up := range us {
		if u.rows[i], u.pre[i] = sqlutil.PrepareUpdate(up, now); u.pre[i] == nil {
			u.todo++
		}
	}
	copy(u.errs, u.pre)
	return u
}

// updateInTx applies the rows of u without an error yet: one set-based
// UPDATE per round and chunk (one for almost every batch) instead of one
// per row. Only rows that missed their fence are read, to tell a missing
// run from a fenced one.
func (s *Store) updateInTx(ctx context.Context, tx *sql.Tx, us []store.Update, u *updateBatch) error {
	if u.todo == 0 {
		return nil
	}
	todo := make([]int, 0, u.todo)
	for i := range us {
		if u.pre[i] == nil {
			todo = append(todo, i)
		}
	}
	matched := make([]bool, len(us))
	byID := map[string]int{}
	for _, round := range sqlutil.Rounds(todo, func(i int) string { return us[i].Task.ID }) {
		err := sqlutil.Chunks(round, func(chunk []int, bucket int) error {
			clear(byID)
			for _, i := range chunk {
				byID[us[i].Task.ID] = i
			}
			if bucket == 1 {
				// One row: the plain fenced UPDATE, whose count says it all,
				// without the join and RETURNING's result set.
				i := chunk[0]
				stmt, err := s.ws.inTx(ctx, tx, sqlutil.UpdateTask)
				if err != nil {
					return err
				}
				defer stmt.Close()
				res, err := stmt.ExecContext(ctx, u.rows[i].Args...)
				if err != nil {
					return err
				}
				n, err := res.RowsAffected()
				matched[i] = n == 1 // id is the key
				return err
			}
			stmt, err := s.ws.inTx(ctx, tx, setUpdateSQL[bucket])
			if err != nil {
				return err
			}
			defer stmt.Close()
			rows, err := stmt.QueryContext(ctx, sqlutil.ChunkArgs(u.rows, chunk, bucket)...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return err
				}
				i, ok := byID[id]
				if !ok || matched[i] {
					return fmt.Errorf("BUG: set-based update returned run %q, twice or not of its chunk", id)
				}
				matched[i] = true
			}
			return rows.Err()
		})
		if err != nil {
			return err
		}
	}
	for _, i := range todo {
		if matched[i] {
			continue
		}
		id := us[i].Task.ID
		switch err := taskExists(ctx, tx, id); {
		case errors.Is(err, core.ErrNotFound):
			u.errs[i] = fmt.Errorf("cannot update run %s: %w", id, err)
		case err != nil:
			return err
		default:
			u.errs[i] = sqlutil.FencedErr(id, us[i].Expect)
		}
	}
	return nil
}
