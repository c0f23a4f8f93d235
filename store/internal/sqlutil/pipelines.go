package sqlutil

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// insertRuns inserts ts (encoded as rows) and their edges in tx, one
// statement each: a pipeline's runs, at most core.MaxPipelineSteps.
func insertRuns(ctx context.Context, tx *sql.Tx, ts []*core.Task, rows []TaskRow) error {
	for i, t := range ts {
		if _, err := tx.ExecContext(ctx, InsertTask, InsertArgs(t, rows[i])...); err != nil {
			return fmt.Errorf("cannot create run %s: %w", t.ID, err)
		}
		if err := InsertEdges(ctx, tx, t); err != nil {
			return err
		}
	}
	return nil
}

func prepareRuns(ts []*core.Task, now time.Time) ([]TaskRow, error) {
	rows := make([]TaskRow, len(ts))
	for i, t := range ts {
		var err error
		if rows[i], err = PrepareCreate(t, now); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// CreatePipeline implements store.Pipelines.
func (s *Shared) CreatePipeline(ctx context.Context, p *store.Pipeline, runs []*core.Task) error {
	if !core.ValidTaskID(p.ID) {
		return fmt.Errorf("cannot create pipeline %q: invalid id", p.ID)
	}
	if len(runs) != len(p.Steps) || len(runs) == 0 {
		return fmt.Errorf("cannot create pipeline %s: %d runs for %d steps", p.ID, len(runs), len(p.Steps))
	}
	now := time.Now()
	rows, err := prepareRuns(runs, now)
	if err != nil {
		return err
	}
	created, err := Nanos(p.CreatedAt)
	if err != nil {
		return err
	}
	var owner string
	err = s.c.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		if owner, err = SweepOwner(tx.QueryRowContext(ctx, SelectOwner, p.UserID), p.UserID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO pipelines (id, name, user_id, created_at) VALUES (?, ?, ?, ?)`,
			p.ID, p.Name, p.UserID, created); err != nil {
			return err
		}
		if err := insertRuns(ctx, tx, runs, rows); err != nil {
			return err
		}
		for i, t := range runs {
			if _, err := tx.ExecContext(ctx, `INSERT INTO pipeline_steps (pipeline_id, idx, name, run_id) VALUES (?, ?, ?, ?)`,
				p.ID, i, p.Steps[i].Name, t.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot create pipeline %s: %w", p.ID, err)
	}
	p.User = owner
	for i, t := range runs {
		t.User = owner
		Normalize(t, rows[i])
		p.Steps[i].RunID = t.ID
	}
	return nil
}

// Pipeline implements store.Pipelines.
func (s *Shared) Pipeline(ctx context.Context, id string) (store.Pipeline, error) {
	var p store.Pipeline
	var created int64
	err := s.c.Read.QueryRowContext(ctx, `SELECT p.id, p.name, p.user_id, u.username, p.created_at
		FROM pipelines p JOIN users u ON u.id = p.user_id WHERE p.id = ?`, id).Scan(&p.ID, &p.Name, &p.UserID, &p.User, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return p, fmt.Errorf("cannot find pipeline %s: %w", id, core.ErrNotFound)
	}
	if err != nil {
		return p, fmt.Errorf("cannot read pipeline %s: %w", id, err)
	}
	p.CreatedAt = Time(created)
	rows, err := s.c.Read.QueryContext(ctx, `SELECT name, run_id FROM pipeline_steps WHERE pipeline_id = ? ORDER BY idx`, id)
	if err != nil {
		return p, fmt.Errorf("cannot read pipeline %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var st store.PipelineStep
		if err := rows.Scan(&st.Name, &st.RunID); err != nil {
			return p, fmt.Errorf("cannot read pipeline %s: %w", id, err)
		}
		p.Steps = append(p.Steps, st)
	}
	return p, rows.Err()
}

// PipelineOfRun implements store.Pipelines.
func (s *Shared) PipelineOfRun(ctx context.Context, runID string) (string, error) {
	var id string
	err := s.c.Read.QueryRowContext(ctx, `SELECT pipeline_id FROM pipeline_steps WHERE run_id = ? LIMIT 1`, runID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("run %s is no pipeline's step: %w", runID, core.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("cannot read the pipeline of run %s: %w", runID, err)
	}
	return id, nil
}

// RetryPipeline implements store.Pipelines.
func (s *Shared) RetryPipeline(ctx context.Context, id string, steps []int, was []string, runs []*core.Task) error {
	if len(steps) != len(runs) || len(was) != len(runs) {
		return fmt.Errorf("cannot retry pipeline %s: %d steps, %d runs", id, len(steps), len(runs))
	}
	rows, err := prepareRuns(runs, time.Now())
	if err != nil {
		return err
	}
	var owner string
	err = s.c.InTx(ctx, func(tx *sql.Tx) error {
		var uid int64
		err := tx.QueryRowContext(ctx, `SELECT user_id FROM pipelines WHERE id = ?`, id).Scan(&uid)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("pipeline %s: %w", id, core.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if owner, err = SweepOwner(tx.QueryRowContext(ctx, SelectOwner, uid), uid); err != nil {
			return err
		}
		// The compare-and-swap first: of two retries at once, the second
		// finds the steps moved and writes nothing.
		for i, idx := range steps {
			res, err := tx.ExecContext(ctx, `UPDATE pipeline_steps SET run_id = ? WHERE pipeline_id = ? AND idx = ? AND run_id = ?`,
				runs[i].ID, id, idx, was[i])
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n != 1 {
				return fmt.Errorf("step %d of pipeline %s no longer runs %s: %w", idx, id, was[i], core.ErrConflict)
			}
		}
		return insertRuns(ctx, tx, runs, rows)
	})
	if err != nil {
		return fmt.Errorf("cannot retry pipeline %s: %w", id, err)
	}
	for i, t := range runs {
		t.User = owner
		Normalize(t, rows[i])
	}
	return nil
}
