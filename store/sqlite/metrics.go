package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"

	"github.com/rlsched/rlsched/core"
)

// AppendMetrics stores pts of run taskID in one transaction. A point whose
// (name, step) is already stored replaces it, so a resent batch is harmless.
// NaN and ±Inf points are dropped: JSON cannot carry them and a diverged run
// must not lose the rest of its batch. core.ErrNotFound for an unknown run.
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
		st, err := tx.PrepareContext(ctx, `INSERT INTO metrics (task_id, name, step, value)
			VALUES (?, ?, ?, ?) ON CONFLICT (task_id, name, step) DO UPDATE SET value = excluded.value`)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, p := range pts {
			if math.IsNaN(p.Value) || math.IsInf(p.Value, 0) {
				continue
			}
			if _, err := st.ExecContext(ctx, taskID, p.Name, p.Step, p.Value); err != nil {
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
	// One read transaction, so the existence check and the series come from
	// the same snapshot.
	tx, err := s.r.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := taskExists(ctx, tx, taskID); err != nil {
		return nil, fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
	}
	q := `SELECT name, step, value FROM metrics WHERE task_id = ?`
	args := []any{taskID}
	if len(names) > 0 {
		q += ` AND name IN (?` + strings.Repeat(`, ?`, len(names)-1) + `)`
		for _, n := range names {
			args = append(args, n)
		}
	}
	rows, err := tx.QueryContext(ctx, q+` ORDER BY name, step`, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
	}
	defer rows.Close()
	out := map[string][][2]float64{}
	for rows.Next() {
		var name string
		var step int64
		var v float64
		if err := rows.Scan(&name, &step, &v); err != nil {
			return nil, fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
		}
		out[name] = append(out[name], [2]float64{float64(step), v})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
	}
	return out, nil
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
