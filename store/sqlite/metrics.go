package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

// AppendMetrics stores pts of run taskID in one transaction. A point whose
// (name, step) is already stored replaces it, so a resent batch is harmless.
// NaN and ±Inf points are dropped: JSON cannot carry them and a diverged run
// must not lose the rest of its batch. A point without a Time keeps the one
// stored (a master rescanning a log after a restart has none to give).
// core.ErrNotFound for an unknown run.
func (s *Store) AppendMetrics(ctx context.Context, taskID string, pts []core.MetricPoint) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := taskExists(ctx, tx, taskID); err != nil {
			return err
		}
		if len(pts) == 0 {
			return nil
		}
		// The run's packed series (sqlutil/packs.go) no longer hold every point.
		if _, err := tx.ExecContext(ctx, `DELETE FROM metric_packs WHERE task_id = ?`, taskID); err != nil {
			return err
		}
		st, err := tx.PrepareContext(ctx, `INSERT INTO metrics (task_id, name, step, value, t)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (task_id, name, step)
			DO UPDATE SET value = excluded.value, t = COALESCE(excluded.t, t)`)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, p := range pts {
			if math.IsNaN(p.Value) || math.IsInf(p.Value, 0) {
				continue
			}
			if _, err := st.ExecContext(ctx, taskID, p.Name, p.Step, p.Value, sqlutil.MetricTime(p)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot append metrics of run %s: %w", taskID, err)
	}
	return nil
}

// Metrics returns the series of run taskID named in names (all when names is
// empty), each as [step, value] pairs in step order. A name with no points is
// absent from the map. core.ErrNotFound for an unknown run.
func (s *Store) Metrics(ctx context.Context, taskID string, names []string) (map[string][][2]float64, error) {
	out := map[string][][2]float64{}
	err := s.readMetrics(ctx, taskID, names, false, func(name string, step int64, v float64, _ sql.NullInt64) {
		out[name] = append(out[name], [2]float64{float64(step), v})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MetricsTimed is Metrics with each point's time: [step, value, Unix ms],
// the time NaN where none is stored.
func (s *Store) MetricsTimed(ctx context.Context, taskID string, names []string) (map[string][][3]float64, error) {
	out := map[string][][3]float64{}
	err := s.readMetrics(ctx, taskID, names, true, func(name string, step int64, v float64, t sql.NullInt64) {
		out[name] = append(out[name], [3]float64{float64(step), v, sqlutil.TimeOrNaN(t)})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readMetrics hands each point of Metrics to row in (name, step) order, with
// its time when withTime (else an invalid one).
func (s *Store) readMetrics(ctx context.Context, taskID string, names []string, withTime bool, row func(string, int64, float64, sql.NullInt64)) error {
	// One read transaction, so the existence check and the series come from
	// the same snapshot.
	tx, err := s.r.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := taskExists(ctx, tx, taskID); err != nil {
		return fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
	}
	q := `SELECT name, step, value, NULL FROM metrics WHERE task_id = ?`
	if withTime {
		q = `SELECT name, step, value, t FROM metrics WHERE task_id = ?`
	}
	args := []any{taskID}
	if len(names) > 0 {
		q += ` AND name IN (?` + strings.Repeat(`, ?`, len(names)-1) + `)`
		for _, n := range names {
			args = append(args, n)
		}
	}
	rows, err := tx.QueryContext(ctx, q+` ORDER BY name, step`, args...)
	if err != nil {
		return fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var step int64
		var v float64
		var t sql.NullInt64
		if err := rows.Scan(&name, &step, &v, &t); err != nil {
			return fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
		}
		row(name, step, v, t)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
	}
	return nil
}

// taskExists returns core.ErrNotFound unless run id exists.
func taskExists(ctx context.Context, tx *sql.Tx, id string) error {
	var ok bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM tasks WHERE id = ?)`, id).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return core.ErrNotFound
	}
	return nil
}
