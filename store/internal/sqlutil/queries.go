package sqlutil

import (
	"context"
	"fmt"
	"strings"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// Dialect spells the conditions the SQL backends write differently: tests
// of the JSON columns (tags, params) and a case-insensitive substring.
type Dialect struct {
	// HasTag is a condition on t.tags with one ? for the tag.
	HasTag string
	// NameContains and NoteContains are conditions on t.name and t.note
	// with one ? for the substring, ASCII letters compared without case.
	NameContains, NoteContains string
	// Param is a condition on t.params holding f.Key equal to f's value,
	// and its arguments (the key reaches the SQL as an argument only).
	Param func(f store.ParamFilter) (string, []any)
}

// ParamPath is the JSON path of a param in both dialects: the name quoted,
// since it may hold '.' and '-'. store.ParseParamFilter has checked it is a
// param name, which holds no quote or backslash.
func ParamPath(key string) string { return `$."` + key + `"` }

// ListTasks returns one page of runs, newest first (created_at DESC, id
// DESC), and the cursor of the next page ("" after the last). The cursor is
// a keyset position, so rows created between pages neither repeat nor shift
// the rest. A malformed cursor wraps store.ErrBadCursor.
func (s *Shared) ListTasks(ctx context.Context, f store.Filter) ([]core.Task, string, error) {
	db, d := s.c.HotRead, s.d.Query
	var where []string
	var args []any
	add := func(cond string, a ...any) { where, args = append(where, cond), append(args, a...) }
	if f.Status != "" {
		add("t.status = ?", string(f.Status))
	}
	if f.User != "" {
		add("u.username = ?", f.User)
	}
	if f.Project != "" {
		add("t.project = ?", f.Project)
	}
	if f.Sweep != "" {
		add("t.sweep_id = ?", f.Sweep)
	}
	if f.RerunOf != "" {
		// The literal lets SQLite use its partial index of reruns.
		add("t.rerun_of <> '' AND t.rerun_of = ?", f.RerunOf)
	}
	if f.Tag != "" {
		add(d.HasTag, f.Tag)
	}
	if f.Name != "" {
		add(d.NameContains, f.Name)
	}
	if f.Note != "" {
		add(d.NoteContains, f.Note)
	}
	if f.Baseline != nil {
		add("t.baseline = ?", *f.Baseline)
	}
	for _, pf := range f.Params {
		cond, a := d.Param(pf)
		add(cond, a...)
	}
	if !f.CreatedAfter.IsZero() {
		n, err := Nanos(f.CreatedAfter)
		if err != nil {
			return nil, "", fmt.Errorf("cannot list runs: %w", err)
		}
		add("t.created_at >= ?", n)
	}
	if !f.CreatedBefore.IsZero() {
		n, err := Nanos(f.CreatedBefore)
		if err != nil {
			return nil, "", fmt.Errorf("cannot list runs: %w", err)
		}
		add("t.created_at < ?", n)
	}
	if f.Cursor != "" {
		at, id, err := DecodeCursor(f.Cursor)
		if err != nil {
			return nil, "", fmt.Errorf("cannot list runs: %w", err)
		}
		// Spelled out rather than as a row-value comparison so that the
		// (created_at DESC, id DESC) indexes serve it.
		add("(t.created_at < ? OR (t.created_at = ? AND t.id < ?))", at, at, id)
	}
	q := TaskCols
	if len(where) > 0 {
		q += "WHERE " + strings.Join(where, " AND ")
	}
	limit := Limit(f.Limit)
	// One row more than asked tells whether another page exists.
	q += " ORDER BY t.created_at DESC, t.id DESC LIMIT ?"
	args = append(args, limit+1)
	ts, err := QueryTasks(ctx, db, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("cannot list runs: %w", err)
	}
	if len(ts) <= limit {
		return ts, "", nil
	}
	ts = ts[:limit]
	last := ts[limit-1]
	return ts, EncodeCursor(last.CreatedAt.UnixNano(), last.ID), nil
}

// queuedCount is QueuedCount's statement where the dialect has none of
// its own (MySQL's tasks_ready_groups covers it).
const queuedCount = `SELECT COUNT(*) FROM tasks WHERE status = 'QUEUED' AND user_id = ?`

// QueuedCount implements store.Store, through the queue's (owner, sweep)
// index.
func (s *Shared) QueuedCount(ctx context.Context, userID int64) (int, error) {
	q, args := s.d.QueuedCount, []any{userID, userID}
	if q == "" {
		q, args = queuedCount, args[:1]
	}
	var n int
	if err := s.c.HotRead.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("cannot count queued runs: %w", err)
	}
	return n, nil
}

// ActiveTasks returns every DISPATCHED or RUNNING run, oldest first.
func (s *Shared) ActiveTasks(ctx context.Context) ([]core.Task, error) {
	ts, err := QueryTasks(ctx, s.c.HotRead, TaskCols+`WHERE t.status IN (?, ?) ORDER BY t.created_at, t.id`,
		string(core.StatusDispatched), string(core.StatusRunning))
	if err != nil {
		return nil, fmt.Errorf("cannot list active runs: %w", err)
	}
	return ts, nil
}

// CountByStatus returns the number of runs in each known status, zeros
// included, so callers (the health page) can range over the map without
// knowing the list.
func (s *Shared) CountByStatus(ctx context.Context) (map[core.Status]int, error) {
	rows, err := s.c.HotRead.QueryContext(ctx, `SELECT status, COUNT(*) FROM tasks GROUP BY status`)
	if err != nil {
		return nil, fmt.Errorf("cannot count runs: %w", err)
	}
	defer rows.Close()
	out := map[core.Status]int{}
	for _, st := range core.Statuses() {
		out[st] = 0
	}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("cannot count runs: %w", err)
		}
		out[core.Status(st)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot count runs: %w", err)
	}
	return out, nil
}
