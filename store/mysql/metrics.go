package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

// metricsPerInsert bounds one multi-row INSERT, far below max_allowed_packet.
const metricsPerInsert = 500

// AppendMetrics stores pts of run taskID in one transaction, as multi-row
// INSERTs. A point whose (name, step) is already stored replaces it, and
// within a batch the later point wins (rows are applied in order), so a
// resent batch is harmless. NaN and ±Inf points are dropped: JSON cannot
// carry them and a diverged run must not lose the rest of its batch. A
// point without a Time keeps the one stored, as sqlite's. core.ErrNotFound
// for an unknown run.
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
		args := make([]any, 0, 5*min(len(pts), metricsPerInsert))
		flush := func() error {
			if len(args) == 0 {
				return nil
			}
			// VALUES(value) rather than MySQL 8's row alias: MariaDB knows
			// only the former.
			q := `INSERT INTO metrics (task_id, name, step, value, t) VALUES (?, ?, ?, ?, ?)` +
				strings.Repeat(`, (?, ?, ?, ?, ?)`, len(args)/5-1) +
				` ON DUPLICATE KEY UPDATE value = VALUES(value), t = COALESCE(VALUES(t), t)`
			_, err := tx.ExecContext(ctx, q, args...)
			args = args[:0]
			return err
		}
		for _, p := range pts {
			if math.IsNaN(p.Value) || math.IsInf(p.Value, 0) {
				continue
			}
			args = append(args, taskID, p.Name, p.Step, p.Value, sqlutil.MetricTime(p))
			if len(args) == 5*metricsPerInsert {
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
//
// One statement answers both questions: the run LEFT JOIN its points gives
// no row for an unknown run and one all-NULL row for a run without points.
func (s *Store) readMetrics(ctx context.Context, taskID string, names []string, withTime bool, row func(string, int64, float64, sql.NullInt64)) error {
	q := `SELECT m.name, m.step, m.value, NULL FROM tasks t LEFT JOIN metrics m ON m.task_id = t.id`
	if withTime {
		q = `SELECT m.name, m.step, m.value, m.t FROM tasks t LEFT JOIN metrics m ON m.task_id = t.id`
	}
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
		return fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
	}
	defer rows.Close()
	found := false
	for rows.Next() {
		found = true
		var name sql.NullString
		var step, t sql.NullInt64
		var v sql.NullFloat64
		if err := rows.Scan(&name, &step, &v, &t); err != nil {
			return fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
		}
		if name.Valid {
			row(name.String, step.Int64, v.Float64, t)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot read metrics of run %s: %w", taskID, err)
	}
	if !found {
		return fmt.Errorf("cannot read metrics of run %s: %w", taskID, core.ErrNotFound)
	}
	return nil
}
