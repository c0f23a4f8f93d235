package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"

	"github.com/rlsched/rlsched/core"
)

// metricsPerInsert bounds one multi-row INSERT, far below max_allowed_packet.
const metricsPerInsert = 500

// AppendMetrics stores pts of run taskID in one transaction, as multi-row
// INSERTs. A point whose (name, step) is already stored replaces it, and
// within a batch the later point wins (rows are applied in order), so a
// resent batch is harmless. NaN and ±Inf points are dropped: JSON cannot
// carry them and a diverged run must not lose the rest of its batch.
// core.ErrNotFound for an unknown run.
func (s *Store) AppendMetrics(ctx context.Context, taskID string, pts []core.MetricPoint) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var ok bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM tasks WHERE id = ?)`, taskID).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return core.ErrNotFound
		}
		// The run's packed series (sqlutil/packs.go) no longer hold every point.
		if len(pts) > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM metric_packs WHERE task_id = ?`, taskID); err != nil {
				return err
			}
		}
		args := make([]any, 0, 4*min(len(pts), metricsPerInsert))
		flush := func() error {
			if len(args) == 0 {
				return nil
			}
			// VALUES(value) rather than MySQL 8's row alias: MariaDB knows
			// only the former.
			q := `INSERT INTO metrics (task_id, name, step, value) VALUES (?, ?, ?, ?)` +
				strings.Repeat(`, (?, ?, ?, ?)`, len(args)/4-1) +
				` ON DUPLICATE KEY UPDATE value = VALUES(value)`
			_, err := tx.ExecContext(ctx, q, args...)
			args = args[:0]
			return err
		}
		for _, p := range pts {
			if math.IsNaN(p.Value) || math.IsInf(p.Value, 0) {
				continue
			}
			args = append(args, taskID, p.Name, p.Step, p.Value)
			if len(args) == 4*metricsPerInsert {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		return flush()
	})
	if err != nil {
		return fmt.Errorf("cannot append metrics of run %s: %w", taskID, err)
	}
	return nil
}

// Metrics returns the series of run taskID named in names (all when names is
// empty), each as [step, value] pairs in step order. A name with no points is
// absent from the map. core.ErrNotFound for an unknown run.
//
// One statement answers both questions: the run LEFT JOIN its points gives
// no row for an unknown run and one all-NULL row for a run without points.
func (s *Store) Metrics(ctx context.Context, taskID string, names []string) (map[string][][2]float64, error) {
	q := `SELECT m.name, m.step, m.value FROM tasks t LEFT JOIN metrics m ON m.task_id = t.id`
	args := []any{}
	if len(names) > 0 {
		q += ` AND m.name IN (?` + strings.Repeat(`, ?`, len(names)-1) + `)`
		for _, n := range names {
			args = append(args, n)
		}
	}
	q += ` WHERE t.id = ? ORDER BY m.name, m.step`
	args = append(args, taskID)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
	}
	defer rows.Close()
	out := map[string][][2]float64{}
	found := false
	for rows.Next() {
		found = true
		var name sql.NullString
		var step sql.NullInt64
		var v sql.NullFloat64
		if err := rows.Scan(&name, &step, &v); err != nil {
			return nil, fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
		}
		if name.Valid {
			out[name.String] = append(out[name.String], [2]float64{float64(step.Int64), v.Float64})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
	}
	if !found {
		return nil, fmt.Errorf("cannot read metrics of run %s: %w", taskID, core.ErrNotFound)
	}
	return out, nil
}
