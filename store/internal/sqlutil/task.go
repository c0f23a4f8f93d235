package sqlutil

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rlsched/rlsched/core"
)

// TaskRow is a run's column values that need encoding, as every SQL backend
// stores them.
type TaskRow struct {
	Command, Env, Tags, GPUIndices string
	Params                         *string
	FinalReward                    *float64
	Created, Updated               int64
	Started, Finished, Preempted   *int64
	Fence                          int64
	Usage                          *string
	History                        *string // nil: none yet
	Placement                      *string // placement_json; nil: none
	Deps                           *string // after and inputsFrom; nil: none
	Python                         *string // core.PythonEnv's JSON; nil: none
}

// EncodeTask validates t and encodes its columns. t.CreatedAt and t.UpdatedAt
// must already be set.
func EncodeTask(t *core.Task) (TaskRow, error) {
	r, err := EncodeUpdate(t)
	if err != nil {
		return r, err
	}
	if r.Command, err = EncodeJSON(t.Command, "[]"); err != nil {
		return r, err
	}
	if r.Env, err = EncodeJSON(t.Env, "{}"); err != nil {
		return r, err
	}
	if r.Tags, err = EncodeJSON(t.Tags, "[]"); err != nil {
		return r, err
	}
	if r.Params, err = EncodeParams(t.Params); err != nil {
		return r, err
	}
	if r.Created, err = Nanos(t.CreatedAt); err != nil {
		return r, err
	}
	if r.Placement, err = encodePlacement(t); err != nil {
		return r, err
	}
	if r.Deps, err = encodeDeps(t); err != nil {
		return r, err
	}
	if t.Python != nil {
		if err := t.Python.Check(); err != nil {
			return r, fmt.Errorf("cannot store run %s: %w", t.ID, err)
		}
		b, err := json.Marshal(t.Python)
		if err != nil {
			return r, err
		}
		s := string(b)
		r.Python = &s
	}
	return r, nil
}

// EncodeUpdate validates and encodes only what UpdateTask writes (status,
// fence, gpuIndices, finalReward, startedAt, finishedAt, updatedAt), so an
// update need not carry the run's other fields.
func EncodeUpdate(t *core.Task) (TaskRow, error) {
	var r TaskRow
	var err error
	if !t.Status.Valid() {
		return r, fmt.Errorf("cannot store run %s: unknown status %q", t.ID, t.Status)
	}
	if t.FinalReward != nil {
		if err := CheckFinite("final reward", *t.FinalReward); err != nil {
			return r, err
		}
	}
	r.FinalReward = t.FinalReward
	r.GPUIndices = EncodeInts(t.GPUIndices)
	if r.Updated, err = Nanos(t.UpdatedAt); err != nil {
		return r, err
	}
	if r.Started, err = NullNanos(t.StartedAt); err != nil {
		return r, err
	}
	if r.Finished, err = NullNanos(t.FinishedAt); err != nil {
		return r, err
	}
	if r.Preempted, err = NullNanos(t.PreemptedAt); err != nil {
		return r, err
	}
	if err := CheckFinite("cpus", t.CPUs); err != nil || t.CPUs < 0 || t.MemoryMB < 0 {
		return r, fmt.Errorf("cannot store run %s: cpus %v and memoryMb %d must be finite and at least 0", t.ID, t.CPUs, t.MemoryMB)
	}
	if u := t.Usage; u != nil {
		if CheckFinite("usage", u.CPUSeconds) != nil || CheckFinite("usage", u.GPUSeconds) != nil {
			return r, fmt.Errorf("cannot store run %s: its usage is not finite", t.ID)
		}
		b, err := json.Marshal(u)
		if err != nil {
			return r, fmt.Errorf("cannot store run %s: %w", t.ID, err)
		}
		s := string(b)
		r.Usage = &s
	}
	if len(t.History) > 0 {
		// Entries made without a time (Dispatch, Lose) are as of this write.
		b, err := json.Marshal(fillHistory(t.History, t.UpdatedAt))
		if err != nil {
			return r, fmt.Errorf("cannot store run %s: %w", t.ID, err)
		}
		s := string(b)
		r.History = &s
	}
	if r.Fence, err = Fence(t.Fence); err != nil {
		return r, err
	}
	return r, nil
}

// Normalize makes t look as a read of it will: nil lists and maps empty,
// params compacted, times in UTC without a monotonic reading, a zero
// optional time nil, HasDiff true when a diff is stored. Backends call it after a successful write so the
// caller's copy matches the stored row.
func Normalize(t *core.Task, r TaskRow) {
	t.Command, _ = DecodeSlice[string](r.Command)
	t.Tags, _ = DecodeSlice[string](r.Tags)
	t.GPUIndices, _ = DecodeSlice[int](r.GPUIndices)
	t.Env, _ = DecodeMap(r.Env)
	t.Params = DecodeParams(r.Params)
	t.CreatedAt, t.UpdatedAt = Time(r.Created), Time(r.Updated)
	t.StartedAt, t.FinishedAt, t.PreemptedAt = NullTime(r.Started), NullTime(r.Finished), NullTime(r.Preempted)
	t.Code.HasDiff = t.Code.DiffID != ""
	t.Warnings = []core.Warning{} // a new run has none; AddWarning alone adds them
}

// SelectOwner reads the username of a run's or a sweep's owner (one ?, the
// user's id).
const SelectOwner = `SELECT username FROM users WHERE id = ?`

// UpdateFinalReward is SetFinalReward's statement.
const UpdateFinalReward = `UPDATE tasks SET final_reward = ?, updated_at = ? WHERE id = ?`

// Task returns the run with id, or core.ErrNotFound.
func (s *Shared) Task(ctx context.Context, id string) (core.Task, error) {
	t, err := ScanTask(s.c.HotRead.QueryRowContext(ctx, TaskCols+`WHERE t.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return core.Task{}, fmt.Errorf("cannot find run %s: %w", id, core.ErrNotFound)
	}
	if err != nil {
		return core.Task{}, fmt.Errorf("cannot read run %s: %w", id, err)
	}
	return t, nil
}

// SetFinalReward records a run's final reward (and bumps updated_at) without
// a fence: the reward is parsed from a log that is already exactly-once.
func (s *Shared) SetFinalReward(ctx context.Context, id string, v float64) error {
	if err := CheckFinite("final reward", v); err != nil {
		return fmt.Errorf("cannot set final reward of run %s: %w", id, err)
	}
	res, err := s.c.HotWrite.ExecContext(ctx, UpdateFinalReward, v, time.Now().UnixNano(), id)
	if err != nil {
		return fmt.Errorf("cannot set final reward of run %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("cannot set final reward of run %s: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("cannot set final reward of run %s: %w", id, core.ErrNotFound)
	}
	return nil
}

// MaxFence returns the highest fence of any run, 0 for an empty store.
func (s *Shared) MaxFence(ctx context.Context) (uint64, error) {
	var f int64
	if err := s.c.Read.QueryRowContext(ctx, `SELECT COALESCE(MAX(fence), 0) FROM tasks`).Scan(&f); err != nil {
		return 0, fmt.Errorf("cannot read highest fence: %w", err)
	}
	return uint64(f), nil
}

// fillHistory is h with every entry without a time at at, in a list of its
// own when one changes (h may be shared with another copy of the run).
func fillHistory(h []core.HistoryEntry, at time.Time) []core.HistoryEntry {
	for i := range h {
		if h[i].At.IsZero() {
			out := slices.Clone(h)
			for j := i; j < len(out); j++ {
				if out[j].At.IsZero() {
					out[j].At = at.UTC()
				}
			}
			return out
		}
	}
	return h
}
