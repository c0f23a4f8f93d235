package mysql

import (
	"context"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store/internal/sqlutil"
)

// PutArtifact inserts or replaces the row of (task, attempt, path). The
// INSERT ... SELECT reads the run under a shared lock, so a run deleted at
// the same moment cannot leave a dangling row.
func (s *Store) PutArtifact(ctx context.Context, a core.Artifact) error {
	if err := sqlutil.CheckArtifact(a); err != nil {
		return err
	}
	args := append(sqlutil.ArtifactArgs(a, time.Now()), a.TaskID)
	// VALUES(col) rather than MySQL 8's row alias: MariaDB knows only the former.
	res, err := s.db.ExecContext(ctx, `INSERT INTO artifacts (task_id, path, attempt, size, sha256, modified_at, stored_at)
		SELECT ?, ?, ?, ?, ?, ?, ? FROM tasks WHERE id = ?
		ON DUPLICATE KEY UPDATE size = VALUES(size), sha256 = VALUES(sha256),
			modified_at = VALUES(modified_at), stored_at = VALUES(stored_at)`, args...)
	if err != nil {
		return fmt.Errorf("cannot record artifact %.200q of run %s: %w", a.Path, a.TaskID, err)
	}
	return sqlutil.Recorded(ctx, s.db, "record an artifact", a.TaskID, res)
}

// Artifacts lists a run's files (store.Store).
func (s *Store) Artifacts(ctx context.Context, taskID string, attempt int) ([]core.Artifact, error) {
	return sqlutil.Artifacts(ctx, s.db, taskID, attempt)
}

// Artifact reads one file's row (store.Store).
func (s *Store) Artifact(ctx context.Context, taskID, path string, attempt int) (core.Artifact, error) {
	return sqlutil.Artifact(ctx, s.db, taskID, path, attempt)
}

// ArtifactUsage sums a run's rows (store.Store).
func (s *Store) ArtifactUsage(ctx context.Context, taskID string) (int, int64, error) {
	return sqlutil.ArtifactUsage(ctx, s.db, taskID)
}

// AddWarning appends to the run's warnings with JSON_ARRAY_APPEND in the
// one UPDATE, so concurrent appends and fenced updates never lose one.
// JSON_COMPACT hands the element over as JSON (MariaDB has no CAST AS
// JSON), not as a string to quote.
func (s *Store) AddWarning(ctx context.Context, id string, w core.Warning) error {
	elem, err := sqlutil.EncodeWarning(w)
	if err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, `UPDATE tasks SET warnings = JSON_ARRAY_APPEND(COALESCE(warnings, '[]'), '$', JSON_COMPACT(?))
		WHERE id = ? AND JSON_LENGTH(COALESCE(warnings, '[]')) < ?`, elem, id, core.MaxWarnings)
	if err != nil {
		return fmt.Errorf("cannot record a warning of run %s: %w", id, err)
	}
	return sqlutil.Recorded(ctx, s.db, "record a warning", id, res)
}
