package sqlutil

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/core"
)

// The artifact index and the warnings of runs, as both SQL backends store
// them: the reads are one dialect; each backend spells its own upsert and
// JSON append (ArtifactDialect).

// ArtifactDialect is the two writes of artifacts and warnings a backend
// spells its own way.
type ArtifactDialect struct {
	// Upsert inserts or replaces the row of (task, attempt, path) with an
	// INSERT ... SELECT from tasks, so an unknown run inserts nothing: args
	// artifactArgs, then the run's id again.
	Upsert string
	// AddWarning appends one JSON element to a run's warnings in the one
	// UPDATE, unless it holds core.MaxWarnings already: args the element,
	// the run's id, core.MaxWarnings.
	AddWarning string
}

// PutArtifact inserts or replaces the row of (task, attempt, path)
// (store.Store).
func (s *Shared) PutArtifact(ctx context.Context, a core.Artifact) error {
	if err := checkArtifact(a); err != nil {
		return err
	}
	args := append(artifactArgs(a, time.Now()), a.TaskID)
	res, err := s.c.Write.ExecContext(ctx, s.d.Artifact.Upsert, args...)
	if err != nil {
		return fmt.Errorf("cannot record artifact %.200q of run %s: %w", a.Path, a.TaskID, err)
	}
	return recorded(ctx, s.c.Read, "record an artifact", a.TaskID, res)
}

// AddWarning appends w to the run's warnings (store.Store); concurrent
// appends and fenced updates never lose one, since the append is the one
// UPDATE.
func (s *Shared) AddWarning(ctx context.Context, id string, w core.Warning) error {
	elem, err := encodeWarning(w)
	if err != nil {
		return err
	}
	res, err := s.c.Write.ExecContext(ctx, s.d.Artifact.AddWarning, elem, id, core.MaxWarnings)
	if err != nil {
		return fmt.Errorf("cannot record a warning of run %s: %w", id, err)
	}
	return recorded(ctx, s.c.Read, "record a warning", id, res)
}

// checkArtifact validates a row before it is written.
func checkArtifact(a core.Artifact) error {
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

// artifactArgs are an upsert's values in the order (task_id, path, attempt,
// size, sha256, modified_at, stored_at).
func artifactArgs(a core.Artifact, now time.Time) []any {
	mod, _ := Nanos(a.ModifiedAt) // checked by checkArtifact
	return []any{a.TaskID, a.Path, a.Attempt, a.Size, a.SHA256, mod, now.UnixNano()}
}

// recorded finishes a write that inserted nothing when its run does not
// exist (INSERT ... SELECT, UPDATE ... WHERE id): zero rows means no such
// run, or (an upsert that changed nothing, a full list) that it exists.
func recorded(ctx context.Context, db RowQuerier, what, id string, res sql.Result) error {
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

// Artifacts lists a run's files (store.Store).
func (s *Shared) Artifacts(ctx context.Context, taskID string, attempt int) ([]core.Artifact, error) {
	q, args := artifactCols+`WHERE a.task_id = ? AND `+newestOnly+` ORDER BY a.path`, []any{taskID}
	if attempt > 0 {
		q, args = artifactCols+`WHERE a.task_id = ? AND a.attempt = ? ORDER BY a.path`, []any{taskID, attempt}
	}
	rows, err := s.c.Read.QueryContext(ctx, q, args...)
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

// Artifact reads one file's row (store.Store).
func (s *Shared) Artifact(ctx context.Context, taskID, path string, attempt int) (core.Artifact, error) {
	q, args := artifactCols+`WHERE a.task_id = ? AND a.path = ? AND `+newestOnly, []any{taskID, path}
	if attempt > 0 {
		q, args = artifactCols+`WHERE a.task_id = ? AND a.path = ? AND a.attempt = ?`, []any{taskID, path, attempt}
	}
	a, err := scanArtifact(s.c.Read.QueryRowContext(ctx, q, args...))
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

// ArtifactUsage sums a run's rows (store.Store).
func (s *Shared) ArtifactUsage(ctx context.Context, taskID string) (int, int64, error) {
	var files int
	var bytes int64
	err := s.c.Read.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(size), 0) FROM artifacts WHERE task_id = ?`, taskID).Scan(&files, &bytes)
	if err != nil {
		return 0, 0, fmt.Errorf("cannot sum the artifacts of run %s: %w", taskID, err)
	}
	return files, bytes, nil
}

// ArtifactBytes sums a user's rows, or everyone's (store.Store).
func (s *Shared) ArtifactBytes(ctx context.Context, userID int64) (int64, error) {
	q, args, whose := `SELECT COALESCE(SUM(size), 0) FROM artifacts`, []any(nil), "every user"
	if userID != 0 {
		q = `SELECT COALESCE(SUM(a.size), 0) FROM artifacts a JOIN tasks t ON t.id = a.task_id WHERE t.user_id = ?`
		args, whose = []any{userID}, fmt.Sprintf("user %d", userID)
	}
	var n int64
	if err := s.c.Read.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("cannot sum the artifacts of %s: %w", whose, err)
	}
	return n, nil
}

// encodeWarning validates w and encodes it as one JSON element, its
// message cut to core.MaxWarningBytes (at a character boundary) and its
// time in UTC.
func encodeWarning(w core.Warning) (string, error) {
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
