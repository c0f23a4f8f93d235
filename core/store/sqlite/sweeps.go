package sqlite

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

// dialect spells sqlutil's conditions with SQLite's JSON functions; the
// name test lowercases ASCII letters only (SQLite's lower()).
var dialect = sqlutil.Dialect{
	HasTag:       `EXISTS (SELECT 1 FROM json_each(t.tags) WHERE json_each.value = ?)`,
	NameContains: `instr(lower(t.name), lower(?)) > 0`,
	Param: func(f store.ParamFilter) (string, []any) {
		p := sqlutil.ParamPath(f.Key)
		switch f.Kind {
		case store.ParamNumber:
			return `(json_type(t.params, ?) IN ('integer', 'real') AND json_extract(t.params, ?) = ?)`, []any{p, p, f.Num}
		case store.ParamString:
			return `(json_type(t.params, ?) = 'text' AND json_extract(t.params, ?) = ?)`, []any{p, p, f.Str}
		case store.ParamBool:
			v := "false"
			if f.Bool {
				v = "true"
			}
			return `json_type(t.params, ?) = ?`, []any{p, v}
		}
		return `json_type(t.params, ?) = 'null'`, []any{p}
	},
}

// membersPerInsert bounds the rows of one multi-row INSERT into
// sweep_members (3 variables each, far under SQLite's 32,766).
const membersPerInsert = 1000

// CreateSweep implements store.Store: the sweep, its members' runs and the
// members in one IMMEDIATE transaction. Any row that fails rolls all back.
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
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		sel, err := s.ws.inTx(ctx, tx, selectOwner)
		if err != nil {
			return err
		}
		if err := sel.QueryRowContext(ctx, sw.UserID).Scan(&owner); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("owner %d: %w", sw.UserID, core.ErrNotFound)
		} else if err != nil {
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
		}
		return insertMembers(ctx, tx, sw.ID, members, 0)
	})
	if err != nil {
		return fmt.Errorf("cannot create sweep %s: %w", sw.ID, err)
	}
	sw.User = owner
	for i, t := range members {
		t.User = owner
		sqlutil.Normalize(t, rows[i])
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
	return sqlutil.SweepLimits(ctx, s.rs, ids)
}

// RetrySweep implements store.Store. The transaction is IMMEDIATE, so the
// latest runs it reads cannot change before it moves the members.
func (s *Store) RetrySweep(ctx context.Context, id string, rerun func(core.Task) core.Task) ([]core.Task, error) {
	var created []*core.Task
	var rows []sqlutil.TaskRow
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		created, rows = nil, nil
		ms, err := sqlutil.LatestRuns(ctx, tx, id, sqlutil.Retryable...)
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
	out := make([]core.Task, len(created))
	for i, t := range created {
		sqlutil.Normalize(t, rows[i])
		out[i] = *t
	}
	return out, nil
}

// SweepMetrics implements store.Store: one read transaction of the read
// pool, then the packs of the ended runs it read as rows, written in
// transactions of sqlutil.PacksPerTx so other writers are not held up.
// A pack that cannot be written costs the next read only. The version is
// the one the packs written leave (sqlutil.Version.Packed).
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
		var made []sqlutil.Pack
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			made = made[:0]
			st, err := tx.PrepareContext(ctx, `INSERT INTO metric_packs (task_id, name, points, data)
				SELECT ?, ?, ?, ? WHERE (SELECT COUNT(*) FROM metrics WHERE task_id = ? AND name = ?) = ?
				ON CONFLICT (task_id, name) DO NOTHING`)
			if err != nil {
				return err
			}
			defer st.Close()
			for _, p := range part {
				res, err := st.ExecContext(ctx, sqlutil.PackArgs(p)...)
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
const packsIndex = "INDEXED BY metric_packs_points"

// SweepSeriesVersion implements store.Store.
func (s *Store) SweepSeriesVersion(ctx context.Context, id, name string) (string, error) {
	v, err := sqlutil.SeriesVersion(ctx, s.rs, id, name, packsIndex)
	if err != nil {
		return "", fmt.Errorf("cannot read the version of sweep %s: %w", id, err)
	}
	return v.String(), nil
}

// readTx runs f in one read transaction of the read pool: every query of
// f sees one snapshot of the file (WAL). The pool is query_only.
func readTx[T any](s *Store, ctx context.Context, f func(tx *sql.Tx) (T, error)) (T, error) {
	var zero T
	tx, err := s.r.BeginTx(ctx, nil)
	if err != nil {
		return zero, fmt.Errorf("cannot begin a read: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	return f(tx)
}
