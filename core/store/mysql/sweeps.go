package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
	"github.com/rlsched/rlsched/core/store/internal/sqlutil"
)

// jsonType is the JSON type of param ? of t.params, in MySQL's and
// MariaDB's names (MariaDB calls 1e-3 an INTEGER: any number type will do).
const jsonType = `JSON_TYPE(JSON_EXTRACT(t.params, ?))`

// dialect spells sqlutil's conditions with MySQL's JSON functions. Strings
// compare as bytes, as everywhere in this schema; the name test lowercases
// with the server's Unicode rules.
var dialect = sqlutil.Dialect{
	HasTag:       `JSON_CONTAINS(t.tags, JSON_QUOTE(?))`,
	NameContains: `LOCATE(LOWER(?), LOWER(t.name)) > 0`,
	Param: func(f store.ParamFilter) (string, []any) {
		p := sqlutil.ParamPath(f.Key)
		switch f.Kind {
		case store.ParamNumber:
			return `(` + jsonType + ` IN ('INTEGER', 'UNSIGNED INTEGER', 'DOUBLE', 'DECIMAL') AND JSON_EXTRACT(t.params, ?) = ?)`,
				[]any{p, p, f.Num}
		case store.ParamString:
			return `(` + jsonType + ` = 'STRING' AND CAST(JSON_UNQUOTE(JSON_EXTRACT(t.params, ?)) AS BINARY) = CAST(? AS BINARY))`,
				[]any{p, p, f.Str}
		case store.ParamBool:
			v := "false"
			if f.Bool {
				v = "true"
			}
			return `(` + jsonType + ` = 'BOOLEAN' AND JSON_UNQUOTE(JSON_EXTRACT(t.params, ?)) = ?)`, []any{p, p, v}
		}
		return jsonType + ` = 'NULL'`, []any{p}
	},
}

// Rows of one multi-row INSERT: runs have 30 columns, members 3; both stay
// far below the 65,535 placeholders and max_allowed_packet.
const (
	tasksPerInsert   = 200
	membersPerInsert = 1000
)

// CreateSweep implements store.Store: the sweep, its members' runs (in
// multi-row INSERTs) and the members in one transaction, retried on a
// deadlock. Any row that fails rolls all back.
func (s *Store) CreateSweep(ctx context.Context, sw *store.Sweep, members []*core.Task) error {
	sargs, err := sqlutil.SweepArgs(sw, len(members))
	if err != nil {
		return err
	}
	rows, err := sqlutil.PrepareMembers(sw.ID, members, time.Now())
	if err != nil {
		return err
	}
	var owner string
	err = s.retryTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT username FROM users WHERE id = ?`, sw.UserID).Scan(&owner); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("owner %d: %w", sw.UserID, core.ErrNotFound)
		} else if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlutil.InsertSweep, sargs...); err != nil {
			return err
		}
		if err := insertTasks(ctx, tx, members, rows); err != nil {
			return err
		}
		return insertMembers(ctx, tx, sw.ID, members, 0)
	})
	switch {
	case isErr(err, errDupEntry):
		return fmt.Errorf("cannot create sweep %s: an id is taken: %w", sw.ID, core.ErrConflict)
	case isErr(err, errNoReferencedRow):
		return fmt.Errorf("cannot create sweep %s: owner %d: %w", sw.ID, sw.UserID, core.ErrNotFound)
	case err != nil:
		return fmt.Errorf("cannot create sweep %s: %w", sw.ID, err)
	}
	sw.User = owner
	for i, t := range members {
		t.User = owner
		sqlutil.Normalize(t, rows[i])
	}
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
	return nil
}

// insertMembers makes ts[i] the latest run of member first+i.
func insertMembers(ctx context.Context, tx *sql.Tx, id string, ts []*core.Task, first int) error {
	for len(ts) > 0 {
		part := ts[:min(len(ts), membersPerInsert)]
		args := make([]any, 0, 3*len(part))
		for i, t := range part {
			args = append(args, id, first+i, t.ID)
		}
		q := sqlutil.InsertMembers + sqlutil.MemberValues[2:] + strings.Repeat(sqlutil.MemberValues, len(part)-1)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
		ts, first = ts[len(part):], first+len(part)
	}
	return nil
}

// Sweep implements store.Store.
func (s *Store) Sweep(ctx context.Context, id string) (store.Sweep, error) {
	return readTx(s, ctx, func(tx *sql.Tx) (store.Sweep, error) { return sqlutil.GetSweep(ctx, tx, id) })
}

// ListSweeps implements store.Store.
func (s *Store) ListSweeps(ctx context.Context, f store.SweepFilter) ([]store.Sweep, string, error) {
	var next string
	sws, err := readTx(s, ctx, func(tx *sql.Tx) ([]store.Sweep, error) {
		sws, n, err := sqlutil.ListSweeps(ctx, tx, f)
		next = n
		return sws, err
	})
	return sws, next, err
}

// SweepRuns implements store.Store.
func (s *Store) SweepRuns(ctx context.Context, id string) ([]core.Task, error) {
	return readTx(s, ctx, func(tx *sql.Tx) ([]core.Task, error) { return sqlutil.SweepRuns(ctx, tx, id) })
}

// SweepLimits implements store.Store.
func (s *Store) SweepLimits(ctx context.Context, ids []string) (map[string]core.SweepLimit, error) {
	return sqlutil.SweepLimits(ctx, s.db, ids)
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
		ms, err := sqlutil.LatestRuns(ctx, tx, id, sqlutil.Retryable...)
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
	out := make([]core.Task, len(created))
	for i, t := range created {
		sqlutil.Normalize(t, rows[i])
		out[i] = *t
	}
	return out, nil
}

// SweepMetrics implements store.Store: one REPEATABLE READ transaction for
// the reads, then the packs of the ended runs it read as rows; the version
// is the one the packs written leave (sqlutil.Version.Packed).
func (s *Store) SweepMetrics(ctx context.Context, id, name string) ([]store.MemberSeries, string, error) {
	var packs, written []sqlutil.Pack
	var version sqlutil.Version
	out, err := readTx(s, ctx, func(tx *sql.Tx) ([]store.MemberSeries, error) {
		out, v, p, err := sqlutil.SweepSeries(ctx, tx, id, name, packsIndex)
		version, packs = v, p
		return out, err
	})
	if err != nil {
		return nil, "", err
	}
	for len(packs) > 0 {
		part := packs[:min(len(packs), sqlutil.PacksPerTx)]
		packs = packs[len(part):]
		// A pack that cannot be written costs the next read only.
		var made []sqlutil.Pack
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			made = made[:0]
			for _, p := range part {
				res, err := tx.ExecContext(ctx, `INSERT IGNORE INTO metric_packs (task_id, name, points, data)
					SELECT ?, ?, ?, ? FROM DUAL WHERE (SELECT COUNT(*) FROM metrics WHERE task_id = ? AND name = ?) = ?`,
					sqlutil.PackArgs(p)...)
				if err != nil {
					return err
				}
				if n, _ := res.RowsAffected(); n == 1 {
					made = append(made, p)
				}
			}
			return nil
		})
		if err == nil {
			written = append(written, made...)
		}
	}
	return out, version.Packed(written).String(), nil
}

// packsIndex makes a sweep's version read its packs' points from their
// index (sqlutil.SeriesVersionQuery).
const packsIndex = "FORCE INDEX (metric_packs_points)"

// SweepSeriesVersion implements store.Store.
func (s *Store) SweepSeriesVersion(ctx context.Context, id, name string) (string, error) {
	v, err := sqlutil.SeriesVersion(ctx, s.db, id, name, packsIndex)
	if err != nil {
		return "", fmt.Errorf("cannot read the version of sweep %s: %w", id, err)
	}
	return v.String(), nil
}

// readTx runs f in one read-only transaction: every query of f sees one
// snapshot (REPEATABLE READ).
func readTx[T any](s *Store, ctx context.Context, f func(tx *sql.Tx) (T, error)) (T, error) {
	var zero T
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return zero, fmt.Errorf("cannot begin a read: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	return f(tx)
}
