// Package mysql is the shared backend of store.Store for several masters, on
// MySQL 8 or MariaDB ≥ 10.6 through github.com/go-sql-driver/mysql.
//
// It stores exactly what the sqlite backend stores, encoded by sqlutil, and
// passes the same conformance suite: times are BIGINT unix nanoseconds,
// list and map columns are JSON text (TEXT, not the JSON type: MySQL would
// reorder keys and add spaces to params), strings compare byte-wise
// (utf8mb4_bin, as SQLite does).
//
// A batch of state changes (UpdateTasks) locks its runs with one SELECT ...
// FOR UPDATE, decides every row's fence against the latest committed state
// under those locks, and writes the winners with one multi-row UPDATE still
// joined on (id, fence, status), run with CLIENT_FOUND_ROWS so the count is
// of matched rows. InnoDB's locking read sees the latest committed row, so
// of many masters racing from one state exactly one wins.
//
// How several masters take queued runs without double-taking: the lease
// Claim is the arbiter and the fenced UPDATE from (fence, QUEUED) the
// durable guard, so QueuedTasks followed by lease.Claim then UpdateTask is
// correct as it stands; masters that read the same head of the queue merely
// lose races.
//
// This package must never hold a transaction open across anything but the
// database, and never read-then-write outside a transaction.
package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

// Pool sizes: enough for a master's API handlers, log writers and
// dispatcher at once, well under MySQL's default max_connections (151) when
// a few masters share one server.
const (
	maxOpenConns    = 32
	maxIdleConns    = 16
	connMaxLifetime = 5 * time.Minute // below any proxy's or wait_timeout's cut
	connMaxIdleTime = time.Minute
	dialTimeout     = 5 * time.Second
	openTimeout     = 30 * time.Second // dial, ping and migrations at Open
)

// Store is a store.Store on one MySQL database.
type Store struct {
	db *sql.DB
	sqlutil.Shared
}

var _ store.Store = (*Store)(nil)

// Open connects to the database named in dsn (go-sql-driver syntax, e.g.
// "rlsched:secret@tcp(db:3306)/rlsched"), applies pending migrations and
// returns the store. A database that does not exist yet is created. Whatever the DSN says,
// parseTime is off (times are integers), CLIENT_FOUND_ROWS is on (the
// fenced UPDATE counts matched rows), parameters are interpolated client-side
// (one round trip per statement) and the session runs in strict mode.
func Open(dsn string) (*Store, error) {
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("cannot open mysql store: %w", err)
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("cannot open mysql store at %s: the DSN names no database (…/DBNAME)", cfg.Addr)
	}
	cfg.ParseTime = false
	cfg.ClientFoundRows = true
	cfg.InterpolateParams = true
	cfg.MultiStatements = false
	if err := cfg.Apply(driver.Charset("utf8mb4", "utf8mb4_bin")); err != nil {
		return nil, fmt.Errorf("cannot open mysql store: %w", err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = dialTimeout
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	// Strict: a too-long value is an error, never silently truncated (a
	// truncated metric name would merge two series).
	cfg.Params["sql_mode"] = "'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'"
	conn, err := driver.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot open mysql store: %w", err)
	}
	db := sql.OpenDB(unavailableConnector{conn}) // errors.go: dial failures are core.ErrUnavailable
	db.SetMaxOpenConns(maxOpenConns)
	db.SetMaxIdleConns(maxIdleConns)
	db.SetConnMaxLifetime(connMaxLifetime)
	db.SetConnMaxIdleTime(connMaxIdleTime)
	s := &Store{db: db}
	// One pool plays every part: parameters are interpolated client-side,
	// so no statement is worth preparing, and a write is seen by every
	// connection once committed. A read-only transaction (REPEATABLE READ)
	// is one snapshot.
	s.Shared = sqlutil.NewShared(sqlutil.Conns{
		Read: db, HotRead: db, Write: db, HotWrite: db, InTx: s.inTx,
		Snapshot: sqlutil.Snapshot{DB: db, Opts: &sql.TxOptions{ReadOnly: true}},
	}, dialects)

	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	err = db.PingContext(ctx)
	var me *driver.MySQLError
	if errors.As(err, &me) && me.Number == errUnknownDatabase {
		// A new deployment: create the database (as the user would by hand),
		// so that "MYSQL_DSN=…/rlsched" is all a first master needs.
		if err = createDatabase(ctx, cfg); err == nil {
			err = db.PingContext(ctx)
		}
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("cannot reach mysql store %s/%s: %w; check that MySQL or MariaDB runs there "+
			"and the DSN's user may log in (scripts/services.sh starts a local MariaDB)", cfg.Addr, cfg.DBName, err)
	}
	if err := s.migrate(ctx, cfg.DBName); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// errUnknownDatabase is ER_BAD_DB_ERROR.
const errUnknownDatabase = 1049

// createDatabase creates cfg.DBName on the server (utf8mb4, byte-wise
// collation like every column here) if it does not exist.
func createDatabase(ctx context.Context, cfg *driver.Config) error {
	c := cfg.Clone()
	c.DBName = ""
	conn, err := driver.NewConnector(c)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	q := "CREATE DATABASE IF NOT EXISTS `" + strings.ReplaceAll(cfg.DBName, "`", "``") + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
	if _, err := db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("database %s does not exist and cannot be created: %w", cfg.DBName, err)
	}
	return nil
}

// Kind names the backend for /api/monitor/health.
func (s *Store) Kind() string { return "mysql" }

// Ping checks that the server answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("cannot reach mysql store: %w", err)
	}
	return nil
}

// Close closes the pool; the store must not be used afterwards.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("cannot close mysql store: %w", err)
	}
	return nil
}

// inTx runs f in a transaction (REPEATABLE READ, InnoDB's default) and
// commits when f returns nil.
func (s *Store) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	return sqlutil.InTx(ctx, s.db, nil, f)
}

// MySQL error numbers this package tells apart.
const (
	errDupEntry        = 1062 // ER_DUP_ENTRY
	errNoReferencedRow = 1452 // ER_NO_REFERENCED_ROW_2
	errDeadlock        = 1213 // ER_LOCK_DEADLOCK
	errDupFieldName    = 1060 // ER_DUP_FIELDNAME
	errDupKeyName      = 1061 // ER_DUP_KEYNAME
)

// isErr reports whether err is MySQL error number n.
func isErr(err error, n uint16) bool {
	var e *driver.MySQLError
	return errors.As(err, &e) && e.Number == n
}
