package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store/internal/sqlutil"
)

// PutArtifact inserts or replaces the row of (task, attempt, path).
func (s *Store) PutArtifact(ctx context.Context, a core.Artifact) error {
	if err := sqlutil.CheckArtifact(a); err != nil {
		return err
	}
	args := append(sqlutil.ArtifactArgs(a, time.Now()), a.TaskID)
	res, err := s.w.ExecContext(ctx, `INSERT INTO artifacts (task_id, path, attempt, size, sha256, modified_at, stored_at)
		SELECT ?, ?, ?, ?, ?, ?, ? FROM tasks WHERE id = ?
		ON CONFLICT (task_id, path, attempt) DO UPDATE SET size = excluded.size, sha256 = excluded.sha256,
			modified_at = excluded.modified_at, stored_at = excluded.stored_at`, args...)
	if err != nil {
		return fmt.Errorf("cannot record artifact %.200q of run %s: %w", a.Path, a.TaskID, err)
	}
	return sqlutil.Recorded(ctx, s.r, "record an artifact", a.TaskID, res)
}

// Artifacts lists a run's files (store.Store).
func (s *Store) Artifacts(ctx context.Context, taskID string, attempt int) ([]core.Artifact, error) {
	return sqlutil.Artifacts(ctx, s.r, taskID, attempt)
}

// Artifact reads one file's row (store.Store).
func (s *Store) Artifact(ctx context.Context, taskID, path string, attempt int) (core.Artifact, error) {
	return sqlutil.Artifact(ctx, s.r, taskID, path, attempt)
}

// ArtifactUsage sums a run's rows (store.Store).
func (s *Store) ArtifactUsage(ctx context.Context, taskID string) (int, int64, error) {
	return sqlutil.ArtifactUsage(ctx, s.r, taskID)
}

// AddWarning appends to the run's warnings with json_insert, in the one
// UPDATE, so concurrent appends and fenced updates never lose one.
func (s *Store) AddWarning(ctx context.Context, id string, w core.Warning) error {
	elem, err := sqlutil.EncodeWarning(w)
	if err != nil {
		return err
	}
	res, err := s.w.ExecContext(ctx, `UPDATE tasks SET warnings = json_insert(warnings, '$[#]', json(?))
		WHERE id = ? AND json_array_length(warnings) < ?`, elem, id, core.MaxWarnings)
	if err != nil {
		return fmt.Errorf("cannot record a warning of run %s: %w", id, err)
	}
	return sqlutil.Recorded(ctx, s.r, "record a warning", id, res)
}
