// Package sqlite is the default, embedded backend of store.Store, on the
// pure-Go driver modernc.org/sqlite (no cgo).
//
// One connection writes and a small pool reads: SQLite allows one writer at
// a time anyway, and funnelling writes through one connection whose
// transactions begin IMMEDIATE means a writer never meets SQLITE_BUSY from
// this process, while WAL mode lets readers run beside it. Every method of
// *Store is safe for concurrent use by many goroutines.
//
// This package must never hold a write transaction open while waiting on
// anything but SQLite, and never read-then-write outside a transaction.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

// readConns bounds the read pool; reads are short and SQLite is in-process.
const readConns = 8

// Store is a store.Store on one SQLite file.
type Store struct {
	w  *sql.DB // the single writer connection
	r  *sql.DB // query_only read pool
	ws *stmtCache
	rs *stmtCache
	sqlutil.Shared
}

// Open opens (creating when missing) the database at path, applies pending
// migrations and returns the store. path must name a file; ":memory:" is not
// supported because the reader and writer pools must share one database.
func Open(path string) (*Store, error) {
	if path == "" || path == ":memory:" || strings.Contains(path, "?") {
		return nil, fmt.Errorf("cannot open sqlite store %q: need a file path without '?'", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("cannot create directory of sqlite store: %w", err)
	}
	// synchronous(FULL): a run is acknowledged only once durably stored
	// (API.md), so a power loss must not roll back a committed transaction.
	w, err := sql.Open("sqlite", path+"?_txlock=immediate"+
		"&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"+
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		return nil, fmt.Errorf("cannot open sqlite store %q: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	s := &Store{w: w}
	if err := s.migrate(context.Background()); err != nil {
		_ = w.Close()
		return nil, err
	}
	if s.ws, err = newStmtCache(context.Background(), w, writeStmts...); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("cannot open sqlite store %q: %w", path, err)
	}
	// Opened after migrating: WAL mode is then already set in the file, and
	// query_only guards against a write slipping onto a read connection.
	// Reads map the file (mmap_size) rather than pread it page by page: a
	// sweep's packed series are tens of MiB, and a syscall per 4 KiB page
	// took half of reading them.
	r, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)"+
		"&_pragma=foreign_keys(1)&_pragma=query_only(1)&_pragma=mmap_size(1073741824)")
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("cannot open sqlite read pool %q: %w", path, err)
	}
	r.SetMaxOpenConns(readConns)
	r.SetMaxIdleConns(readConns)
	s.r, s.rs = r, &stmtCache{db: r, lazy: true, m: map[string]*sql.Stmt{}}
	// Reads on the read pool, writes on the writer, each also through its
	// statement cache for the hot ones. What reads on Write (SetPriority's
	// check) reads through the writer: a read connection may not see the
	// write's outcome yet. A read transaction of the read pool sees one
	// snapshot of the file (WAL); the pool is query_only.
	s.Shared = sqlutil.NewShared(sqlutil.Conns{Read: r, HotRead: s.rs, Write: w, HotWrite: s.ws, InTx: s.inTx,
		Snapshot: sqlutil.Snapshot{DB: r}}, dialects)
	if err := s.Ping(context.Background()); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// Kind names the backend for /api/monitor/health.
func (s *Store) Kind() string { return "sqlite" }

// Ping checks that both pools can reach the file.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.w.PingContext(ctx); err != nil {
		return fmt.Errorf("cannot reach sqlite store: %w", err)
	}
	if err := s.r.PingContext(ctx); err != nil {
		return fmt.Errorf("cannot reach sqlite store: %w", err)
	}
	return nil
}

// Close closes both pools; the store must not be used afterwards.
func (s *Store) Close() error {
	var errR error
	if s.ws != nil {
		s.ws.close()
	}
	if s.r != nil {
		s.rs.close()
		errR = s.r.Close()
	}
	if err := errors.Join(errR, s.w.Close()); err != nil {
		return fmt.Errorf("cannot close sqlite store: %w", err)
	}
	return nil
}

// inTx runs f in a write transaction (BEGIN IMMEDIATE, from the DSN) and
// commits when f returns nil.
func (s *Store) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	return sqlutil.InTx(ctx, s.w, nil, f)
}

// isUnique reports whether err is a UNIQUE or PRIMARY KEY violation.
func isUnique(err error) bool {
	var e *msqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	c := e.Code()
	return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}
