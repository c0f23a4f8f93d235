package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core/store/internal/sqlutil"
)

// PutCodeDiff stores diff once by content and returns its id; the same
// bytes stored again are the same row.
func (s *Store) PutCodeDiff(ctx context.Context, diff []byte) (string, error) {
	id, err := sqlutil.CodeDiffID(diff)
	if err != nil {
		return "", err
	}
	if _, err := s.w.ExecContext(ctx, `INSERT INTO code_diffs (id, diff, created_at) VALUES (?, ?, ?)
		ON CONFLICT (id) DO NOTHING`, id, diff, time.Now().UnixNano()); err != nil {
		return "", fmt.Errorf("cannot store code diff: %w", err)
	}
	return id, nil
}

// CodeDiff returns the diff stored under id, or core.ErrNotFound.
func (s *Store) CodeDiff(ctx context.Context, id string) ([]byte, error) {
	return sqlutil.CodeDiff(ctx, s.r, id)
}
