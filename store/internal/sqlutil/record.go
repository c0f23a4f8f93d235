package sqlutil

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// maxTagSwaps bounds EditRecord's compare-and-swap on tags: only edits of
// the same run's tags at the very same moment make it try again.
const maxTagSwaps = 64

// EditRecord writes a run's owner-edited fields (store.Store). The reads
// and the write are on Write, so a retry sees the write that beat it.
func (s *Shared) EditRecord(ctx context.Context, id string, e store.RecordEdit) (core.Task, error) {
	for range maxTagSwaps {
		sets := []string{"updated_at = ?"}
		args := []any{time.Now().UnixNano()}
		if e.Name != nil {
			sets, args = append(sets, "name = ?"), append(args, *e.Name)
		}
		if e.Note != nil {
			sets, args = append(sets, "note = ?"), append(args, *e.Note)
		}
		if e.Baseline != nil {
			sets, args = append(sets, "baseline = ?"), append(args, *e.Baseline)
		}
		where, wargs := "id = ?", []any{id}
		if e.Tags != nil {
			var raw string
			err := s.c.Write.QueryRowContext(ctx, `SELECT tags FROM tasks WHERE id = ?`, id).Scan(&raw)
			if errors.Is(err, sql.ErrNoRows) {
				return core.Task{}, fmt.Errorf("cannot edit run %s: %w", id, core.ErrNotFound)
			}
			if err != nil {
				return core.Task{}, fmt.Errorf("cannot edit run %s: %w", id, err)
			}
			cur, err := DecodeSlice[string](raw)
			if err != nil {
				return core.Task{}, fmt.Errorf("cannot edit run %s: its tags: %w", id, err)
			}
			next, err := e.Tags(cur)
			if err != nil {
				return core.Task{}, err
			}
			enc, err := EncodeJSON(next, "[]")
			if err != nil {
				return core.Task{}, fmt.Errorf("cannot edit run %s: %w", id, err)
			}
			sets, args = append(sets, "tags = ?"), append(args, enc)
			where, wargs = where+" AND tags = ?", append(wargs, raw)
		}
		res, err := s.c.Write.ExecContext(ctx, `UPDATE tasks SET `+strings.Join(sets, ", ")+` WHERE `+where,
			append(args, wargs...)...)
		if err != nil {
			return core.Task{}, fmt.Errorf("cannot edit run %s: %w", id, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return core.Task{}, fmt.Errorf("cannot edit run %s: %w", id, err)
		}
		if n > 0 {
			return s.Task(ctx, id)
		}
		if e.Tags == nil {
			return core.Task{}, fmt.Errorf("cannot edit run %s: %w", id, core.ErrNotFound)
		}
		// The tags changed since they were read (or the run went): read again.
	}
	return core.Task{}, fmt.Errorf("cannot edit run %s: its tags kept changing under %d edits; try again", id, maxTagSwaps)
}
