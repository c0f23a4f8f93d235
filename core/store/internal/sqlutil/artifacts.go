package sqlutil

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/artifact"
)

// The artifact index and the warnings of runs, as both SQL backends store
// them: the reads are one dialect; each backend spells its own upsert and
// JSON append.

// CheckArtifact validates a row before it is written.
func CheckArtifact(a core.Artifact) error {
	switch {
	case !core.ValidTaskID(a.TaskID):
		return fmt.Errorf("cannot record an artifact of run %.80q: invalid id", a.TaskID)
	case a.Attempt < 1:
		return fmt.Errorf("cannot record artifact %s of run %s: attempt %d", a.Path, a.TaskID, a.Attempt)
	case a.Size < 0:
		return fmt.Errorf("cannot record artifact %s of run %s: size %d", a.Path, a.TaskID, a.Size)
	}
	if err := core.CheckArtifactPath(a.Path); err != nil {
		return fmt.Errorf("cannot record an artifact of run %s: %w", a.TaskID, err)
	}
	if err := artifact.CheckSHA256(a.SHA256); err != nil {
		return fmt.Errorf("cannot record artifact %s of run %s: %w", a.Path, a.TaskID, err)
	}
	if _, err := Nanos(a.ModifiedAt); err != nil {
		return fmt.Errorf("cannot record artifact %s of run %s: %w", a.Path, a.TaskID, err)
	}
	return nil
}

// ArtifactArgs are an upsert's values in the order (task_id, path, attempt,
// size, sha256, modified_at, stored_at); the backends insert them with
// INSERT ... SELECT from tasks, so an unknown run inserts nothing.
func ArtifactArgs(a core.Artifact, now time.Time) []any {
	mod, _ := Nanos(a.ModifiedAt) // checked by CheckArtifact
	return []any{a.TaskID, a.Path, a.Attempt, a.Size, a.SHA256, mod, now.UnixNano()}
}

// Recorded finishes a write that inserted nothing when its run does not
// exist (INSERT ... SELECT, UPDATE ... WHERE id): zero rows means no such
// run, or (an upsert that changed nothing, a full list) that it exists.
func Recorded(ctx context.Context, db interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, what, id string, res sql.Result) error {
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	var one int
	err := db.QueryRowContext(ctx, `SELECT 1 FROM tasks WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("cannot %s of run %s: %w", what, id, core.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("cannot %s of run %s: %w", what, id, err)
	}
	return nil
}

const artifactCols = `SELECT a.task_id, a.path, a.attempt, a.size, a.sha256, a.modified_at FROM artifacts a `

// newestOnly keeps, of each path, the row of its highest attempt; the
// primary key (task_id, path, attempt) answers it per row.
const newestOnly = `a.attempt = (SELECT MAX(b.attempt) FROM artifacts b WHERE b.task_id = a.task_id AND b.path = a.path)`

// Artifacts lists a run's rows (store.Store's Artifacts).
func Artifacts(ctx context.Context, db Querier, taskID string, attempt int) ([]core.Artifact, error) {
	q, args := artifactCols+`WHERE a.task_id = ? AND `+newestOnly+` ORDER BY a.path`, []any{taskID}
	if attempt > 0 {
		q, args = artifactCols+`WHERE a.task_id = ? AND a.attempt = ? ORDER BY a.path`, []any{taskID, attempt}
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot list the artifacts of run %s: %w", taskID, err)
	}
	defer rows.Close()
	out := []core.Artifact{}
	for rows.Next() {
		a, err := scanArtifact(rows)
		if err != nil {
			return nil, fmt.Errorf("cannot list the artifacts of run %s: %w", taskID, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot list the artifacts of run %s: %w", taskID, err)
	}
	return out, nil
}

// Artifact reads one row (store.Store's Artifact).
func Artifact(ctx context.Context, db interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, taskID, path string, attempt int) (core.Artifact, error) {
	q, args := artifactCols+`WHERE a.task_id = ? AND a.path = ? AND `+newestOnly, []any{taskID, path}
	if attempt > 0 {
		q, args = artifactCols+`WHERE a.task_id = ? AND a.path = ? AND a.attempt = ?`, []any{taskID, path, attempt}
	}
	a, err := scanArtifact(db.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return core.Artifact{}, fmt.Errorf("cannot find artifact %.200q of run %s: %w", path, taskID, core.ErrNotFound)
	}
	if err != nil {
		return core.Artifact{}, fmt.Errorf("cannot read artifact %.200q of run %s: %w", path, taskID, err)
	}
	return a, nil
}

func scanArtifact(sc Scanner) (core.Artifact, error) {
	var a core.Artifact
	var mod int64
	if err := sc.Scan(&a.TaskID, &a.Path, &a.Attempt, &a.Size, &a.SHA256, &mod); err != nil {
		return core.Artifact{}, err
	}
	a.ModifiedAt = Time(mod)
	return a, nil
}

// ArtifactUsage sums a run's rows (store.Store's ArtifactUsage).
func ArtifactUsage(ctx context.Context, db interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, taskID string) (int, int64, error) {
	var files int
	var bytes int64
	err := db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(size), 0) FROM artifacts WHERE task_id = ?`, taskID).Scan(&files, &bytes)
	if err != nil {
		return 0, 0, fmt.Errorf("cannot sum the artifacts of run %s: %w", taskID, err)
	}
	return files, bytes, nil
}

// EncodeWarning validates w and encodes it as one JSON element, its
// message cut to core.MaxWarningBytes (at a character boundary) and its
// time in UTC.
func EncodeWarning(w core.Warning) (string, error) {
	if w.Code == "" || len(w.Code) > 64 {
		return "", fmt.Errorf("cannot record a warning: code %.80q", w.Code)
	}
	if len(w.Message) > core.MaxWarningBytes {
		cut := core.MaxWarningBytes
		for cut > 0 && !utf8.RuneStart(w.Message[cut]) {
			cut--
		}
		w.Message = w.Message[:cut]
	}
	if _, err := Nanos(w.At); err != nil {
		return "", fmt.Errorf("cannot record a warning: %w", err)
	}
	w.At = w.At.UTC().Round(0)
	b, err := json.Marshal(w)
	if err != nil {
		return "", fmt.Errorf("cannot record a warning: %w", err)
	}
	return string(b), nil
}

// DecodeWarnings reads a warnings column (NULL or a JSON array); never nil.
func DecodeWarnings(s *string) ([]core.Warning, error) {
	out := []core.Warning{}
	if s == nil || *s == "" {
		return out, nil
	}
	if err := json.Unmarshal([]byte(*s), &out); err != nil {
		return nil, fmt.Errorf("cannot decode the warnings column: %w", err)
	}
	if out == nil {
		out = []core.Warning{}
	}
	return out, nil
}
