package sqlutil

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
)

// codeDiffID is the id a diff is stored under: the sha256 of its bytes, in
// hex. It checks the diff against core.MaxCodeDiffBytes.
func codeDiffID(diff []byte) (string, error) {
	if len(diff) == 0 {
		return "", errors.New("cannot store an empty diff")
	}
	if len(diff) > core.MaxCodeDiffBytes {
		return "", fmt.Errorf("cannot store a diff of %d bytes: at most %d", len(diff), core.MaxCodeDiffBytes)
	}
	sum := sha256.Sum256(diff)
	return hex.EncodeToString(sum[:]), nil
}

func validDiffID(id string) bool {
	if len(id) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// PutCodeDiff stores diff once by content and returns its id; the same
// bytes stored again are the same row (also when two masters race).
func (s *Shared) PutCodeDiff(ctx context.Context, diff []byte) (string, error) {
	id, err := codeDiffID(diff)
	if err != nil {
		return "", err
	}
	if _, err := s.c.Write.ExecContext(ctx, s.d.PutCodeDiff, id, diff, time.Now().UnixNano()); err != nil {
		return "", fmt.Errorf("cannot store code diff: %w", err)
	}
	return id, nil
}

// CodeDiff returns the diff stored under id; core.ErrNotFound when there
// is none (or id cannot be one).
func (s *Shared) CodeDiff(ctx context.Context, id string) ([]byte, error) {
	if !validDiffID(id) {
		return nil, fmt.Errorf("cannot read code diff %q: %w", id, core.ErrNotFound)
	}
	var diff []byte
	err := s.c.Read.QueryRowContext(ctx, `SELECT diff FROM code_diffs WHERE id = ?`, id).Scan(&diff)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("cannot read code diff %s: %w", id, core.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read code diff %s: %w", id, err)
	}
	return diff, nil
}
