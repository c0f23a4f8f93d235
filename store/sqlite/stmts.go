package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
)

// maxCachedStmts bounds a pool's prepared statements. The hot queries are a
// handful of constant strings; a query built from input (a list filter, an
// IN list) past the bound simply runs unprepared.
const maxCachedStmts = 64

// stmtCache prepares each query once per pool instead of once per call:
// profiles of the dispatch benchmark showed SQLite's parser and planner
// taking a third of the master's CPU. database/sql keeps the statement
// prepared on every connection of the pool it was used on, and a
// transaction of the same pool reuses it (sql.Tx.StmtContext).
//
// The writer pool's statements are all prepared by newStmtCache: preparing
// one later would need the pool's only connection, which a transaction
// asking for the statement already holds.
type stmtCache struct {
	db   *sql.DB
	lazy bool // prepare on first use (the read pool)
	mu   sync.Mutex
	m    map[string]*sql.Stmt
}

// newStmtCache prepares qs on db now; with none, the cache prepares each
// query on first use.
func newStmtCache(ctx context.Context, db *sql.DB, qs ...string) (*stmtCache, error) {
	c := &stmtCache{db: db, lazy: len(qs) == 0, m: map[string]*sql.Stmt{}}
	for _, q := range qs {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("cannot prepare %q: %w", q, err)
		}
		c.m[q] = st
	}
	return c, nil
}

// stmt returns q prepared on the pool, or nil when the cache is full or the
// prepare failed (the caller then runs q unprepared and meets the error,
// if any, there).
func (c *stmtCache) stmt(ctx context.Context, q string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[q]; ok {
		return st
	}
	if !c.lazy || c.m == nil || len(c.m) >= maxCachedStmts {
		return nil
	}
	// Not ctx: the statement outlives this call.
	st, err := c.db.PrepareContext(context.WithoutCancel(ctx), q)
	if err != nil {
		return nil
	}
	c.m[q] = st
	return st
}

// QueryContext makes the cache a sqlutil.Querier over its pool.
func (c *stmtCache) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := c.stmt(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return c.db.QueryContext(ctx, q, args...)
}

func (c *stmtCache) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := c.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return c.db.QueryRowContext(ctx, q, args...)
}

func (c *stmtCache) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := c.stmt(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return c.db.ExecContext(ctx, q, args...)
}

// inTx returns q prepared for tx, a transaction of the cache's pool; the
// statement is closed with the transaction.
func (c *stmtCache) inTx(ctx context.Context, tx *sql.Tx, q string) (*sql.Stmt, error) {
	if st := c.stmt(ctx, q); st != nil {
		return tx.StmtContext(ctx, st), nil
	}
	return tx.PrepareContext(ctx, q)
}

// close closes every statement; later calls run unprepared.
func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		_ = st.Close()
	}
	c.m = nil
}

// preparedTx runs tx's statements prepared once on the cache's pool when
// the cache has them (sqlutil.Tx): a group commit's usage charges would
// otherwise parse their four statements again in every batch.
type preparedTx struct {
	tx *sql.Tx
	c  *stmtCache
}

func (p preparedTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := p.c.inTx(ctx, p.tx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (p preparedTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := p.c.stmt(ctx, q); st != nil {
		return p.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return p.tx.QueryRowContext(ctx, q, args...)
}
