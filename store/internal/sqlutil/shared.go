package sqlutil

import (
	"context"
	"database/sql"
	"fmt"
)

// Conn runs statements: a pool, a statement cache over one, or a
// transaction.
type Conn interface {
	Querier
	RowQuerier
	Execer
}

// Conns are the connections a backend lends Shared, by what they are used
// for. MySQL's one pool plays every part; SQLite splits reads from its one
// writer and prepares the hot statements once.
type Conns struct {
	// Read runs reads outside a transaction.
	Read Conn
	// HotRead runs the reads of hot paths (a run, a user, a sweep's
	// limits), worth a prepared statement.
	HotRead Conn
	// Write runs writes of one statement outside a transaction, and the
	// reads that must see what such a write did.
	Write Conn
	// HotWrite is Write for the writes of hot paths.
	HotWrite Conn
	// InTx runs f in a write transaction and commits when f returns nil.
	InTx func(ctx context.Context, f func(tx *sql.Tx) error) error
	// Snapshot begins the read transactions whose queries must all see one
	// snapshot.
	Snapshot Snapshot
}

// Snapshot begins read transactions on DB with Opts.
type Snapshot struct {
	DB   *sql.DB
	Opts *sql.TxOptions
}

// readTx runs f in one read transaction of r, rolled back when f returns:
// every query of f sees one snapshot.
func readTx[T any](ctx context.Context, r Snapshot, f func(tx *sql.Tx) (T, error)) (T, error) {
	var zero T
	tx, err := r.DB.BeginTx(ctx, r.Opts)
	if err != nil {
		return zero, fmt.Errorf("cannot begin a read: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	return f(tx)
}

// InTx runs f in a transaction of db begun with opts and commits when f
// returns nil; when f fails, it rolls back and returns f's error.
func InTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, f func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("cannot begin transaction: %w", err)
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("cannot commit transaction: %w", err)
	}
	return nil
}

// Dialects are the statements a backend spells its own way for Shared.
type Dialects struct {
	Query    Dialect
	Usage    UsageDialect
	Quota    QuotaDialect
	Artifact ArtifactDialect
	Sweep    SweepDialect
	// UserLock ends the reads of a change of users (UpdateUser,
	// DeleteUser): " FOR UPDATE" where two changes may run at once.
	UserLock string
	// PutCodeDiff inserts a code diff unless its id is stored already:
	// args id, diff, created_at.
	PutCodeDiff string
	// RequestCancel inserts a run's cancel request with an INSERT ...
	// SELECT from tasks, unless one is recorded already: args
	// requested_at, the run's id.
	RequestCancel string
	// KeepDecision inserts a sweep's rung decision unless one of its run
	// at its rung is kept already: args sweep_id, task_id, rung, step,
	// value, cut, peers, stop, decided_at.
	KeepDecision string
	// QueuedCount counts a user's QUEUED runs, args the user id twice;
	// "" for queuedCount's plain statement.
	QueuedCount string
	// WaitingIndex follows "FROM tasks c" in DecidableWaiting: the index
	// of the runs waiting for dependencies ("" to let the backend choose).
	WaitingIndex string
}

// Shared implements the methods of store.Store that both SQL backends
// implement alike, on the connections and in the dialect of the backend
// that embeds it (NewShared); the backend writes only what it does its own
// way. Every method is safe for concurrent use.
type Shared struct {
	c Conns
	d Dialects
}

// NewShared returns the shared methods on c, spelled in d.
func NewShared(c Conns, d Dialects) Shared { return Shared{c: c, d: d} }
