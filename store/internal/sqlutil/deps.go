package sqlutil

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/rlsched/rlsched/core"
)

// A run's dependencies (issue 29): its after and inputsFrom in the deps
// column (read back with the run), its edges in task_deps (child_id,
// parent_id, cond), indexed both ways, and waiting = 1 while undecided.

// depsColumn is the JSON of the deps column.
type depsColumn struct {
	After      []core.Dep `json:"after,omitempty"`
	InputsFrom []string   `json:"inputsFrom,omitempty"`
}

// checkDeps refuses a run whose after or inputsFrom a backend cannot store.
func checkDeps(t *core.Task) error {
	if len(t.After) > core.MaxParents {
		return fmt.Errorf("cannot create run %s: %d parents, at most %d", t.ID, len(t.After), core.MaxParents)
	}
	seen := make(map[string]bool, len(t.After))
	for i, d := range t.After {
		if !core.ValidTaskID(d.Run) || d.Run == t.ID || seen[d.Run] {
			return fmt.Errorf("cannot create run %s: after[%d]: invalid, repeated or own run id %.80q", t.ID, i, d.Run)
		}
		if !core.ValidWhen(d.When) {
			return fmt.Errorf("cannot create run %s: after[%d]: unknown condition %.20q", t.ID, i, d.When)
		}
		seen[d.Run] = true
	}
	for i, id := range t.InputsFrom {
		if !core.ValidTaskID(id) {
			return fmt.Errorf("cannot create run %s: inputsFrom[%d]: invalid run id %.80q", t.ID, i, id)
		}
	}
	return nil
}

func encodeDeps(t *core.Task) (*string, error) {
	if len(t.After) == 0 && len(t.InputsFrom) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(depsColumn{After: t.After, InputsFrom: t.InputsFrom})
	if err != nil {
		return nil, err
	}
	s := string(b)
	return &s, nil
}

func decodeDeps(t *core.Task, col *string) error {
	if col == nil || *col == "" {
		return nil
	}
	var d depsColumn
	if err := json.Unmarshal([]byte(*col), &d); err != nil {
		return fmt.Errorf("cannot decode its dependencies: %w", err)
	}
	t.After, t.InputsFrom = d.After, d.InputsFrom
	return nil
}

// edgesPerInsert bounds the rows of one INSERT of edges (3 placeholders each).
const edgesPerInsert = 300

// InsertEdges writes t's edges in the transaction that inserts t (right
// after its row), so a run never exists waiting without the edges that
// release it.
func InsertEdges(ctx context.Context, tx Execer, t *core.Task) error {
	for start := 0; start < len(t.After); start += edgesPerInsert {
		end := min(len(t.After), start+edgesPerInsert)
		var b strings.Builder
		b.WriteString(`INSERT INTO task_deps (child_id, parent_id, cond) VALUES `)
		args := make([]any, 0, 3*(end-start))
		for i := start; i < end; i++ {
			if i > start {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?)")
			args = append(args, t.ID, t.After[i].Run, t.After[i].When)
		}
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("cannot store the dependencies of run %s: %w", t.ID, err)
		}
	}
	return nil
}

// terminalList is the final statuses, quoted for SQL.
const terminalList = `('SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMEOUT')`

// WaitingChildrenQuery reads the waiting children of n parents. The edges
// are the outer loop (EXISTS, not a join): joined, SQLite walked every
// QUEUED waiting-or-not run by the status index and looked each up, the
// whole queue for every batch of ends.
func WaitingChildrenQuery(n int) string {
	return `SELECT DISTINCT e.child_id FROM task_deps e WHERE e.parent_id IN (` + placeholders(n) + `)
		AND EXISTS (SELECT 1 FROM tasks c WHERE c.id = e.child_id AND c.status = 'QUEUED' AND c.waiting = 1)
		ORDER BY e.child_id`
}

// WaitingChildren implements store.Dependencies: one query per 500
// parents. The dependency controller asks for every run that ends, so a
// group commit's ends are one statement, not one each (its parse alone
// was 10% of the master's CPU in the dispatch bench).
func (s *Shared) WaitingChildren(ctx context.Context, parents ...string) ([]string, error) {
	out := []string{}
	for start := 0; start < len(parents); start += 500 {
		part := parents[start:min(len(parents), start+500)]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		rows, err := s.c.Read.QueryContext(ctx, WaitingChildrenQuery(len(part)), args...)
		if err != nil {
			return nil, fmt.Errorf("cannot list the runs waiting for %d runs: %w", len(part), err)
		}
		ids, err := scanIDs(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, ids...)
	}
	if len(parents) > 500 {
		slices.Sort(out)
		out = slices.Compact(out)
	}
	return out, nil
}

// Parents implements store.Dependencies.
func (s *Shared) Parents(ctx context.Context, children []string) (map[string][]core.ParentState, error) {
	out := make(map[string][]core.ParentState, len(children))
	for start := 0; start < len(children); start += 500 {
		part := children[start:min(len(children), start+500)]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		rows, err := s.c.Read.QueryContext(ctx, `SELECT e.child_id, e.parent_id, e.cond, COALESCE(p.status, '')
			FROM task_deps e LEFT JOIN tasks p ON p.id = e.parent_id
			WHERE e.child_id IN (`+placeholders(len(part))+`) ORDER BY e.child_id, e.parent_id`, args...)
		if err != nil {
			return nil, fmt.Errorf("cannot read the parents of runs: %w", err)
		}
		for rows.Next() {
			var child, status string
			var p core.ParentState
			if err := rows.Scan(&child, &p.Parent, &p.When, &status); err != nil {
				rows.Close()
				return nil, fmt.Errorf("cannot read the parents of runs: %w", err)
			}
			p.Status = core.Status(status)
			out[child] = append(out[child], p)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("cannot read the parents of runs: %w", err)
		}
	}
	return out, nil
}

// ReleaseWaiting implements store.Dependencies.
func (s *Shared) ReleaseWaiting(ctx context.Context, ids []string) (int, error) {
	n := 0
	for start := 0; start < len(ids); start += 500 {
		part := ids[start:min(len(ids), start+500)]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		res, err := s.c.Write.ExecContext(ctx, `UPDATE tasks SET waiting = 0
			WHERE status = 'QUEUED' AND waiting = 1 AND id IN (`+placeholders(len(part))+`)`, args...)
		if err != nil {
			return n, fmt.Errorf("cannot release waiting runs: %w", err)
		}
		k, _ := res.RowsAffected()
		n += int(k)
	}
	return n, nil
}

// DecidableWaiting implements store.Dependencies: the waiting runs none of
// whose parents is still going, or one of whose parents failed its
// condition (a missing parent fails every condition).
func (s *Shared) DecidableWaiting(ctx context.Context, limit int) ([]string, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	rows, err := s.c.Read.QueryContext(ctx, `SELECT c.id FROM tasks c `+s.d.WaitingIndex+` WHERE c.status = 'QUEUED' AND c.waiting = 1 AND (
		NOT EXISTS (SELECT 1 FROM task_deps e JOIN tasks p ON p.id = e.parent_id
			WHERE e.child_id = c.id AND p.status NOT IN `+terminalList+`)
		OR EXISTS (SELECT 1 FROM task_deps e LEFT JOIN tasks p ON p.id = e.parent_id
			WHERE e.child_id = c.id AND (p.id IS NULL
				OR (e.cond = 'succeeded' AND p.status IN ('FAILED', 'CANCELLED', 'TIMEOUT'))
				OR (e.cond = 'failed' AND p.status = 'SUCCEEDED'))))
		ORDER BY c.id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("cannot list decidable waiting runs: %w", err)
	}
	return scanIDs(rows)
}

func scanIDs(rows interface {
	Next() bool
	Scan(...any) error
	Close() error
	Err() error
}) ([]string, error) {
	defer rows.Close()
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
