package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

// CreateUser inserts u and sets its ID, Role and (when zero) CreatedAt. The
// role is decided inside the INSERT itself, so of two first users created at
// once only one becomes ADMIN. An empty role means USER.
func (s *Store) CreateUser(ctx context.Context, u *core.User) error {
	role, createdNs, err := sqlutil.NewUser(u, time.Now())
	if err != nil {
		return err
	}
	var id int64
	var gotRole string
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `INSERT INTO users(username, username_fold, role, password_hash, created_at)
			SELECT ?, ?, CASE WHEN EXISTS (SELECT 1 FROM users) THEN ? ELSE 'ADMIN' END, ?, ?
			RETURNING id, role`,
			u.Username, core.UsernameFold(u.Username), string(role), u.PasswordHash, createdNs).Scan(&id, &gotRole)
	})
	if isUnique(err) {
		return fmt.Errorf("cannot create user %q: username taken: %w", u.Username, core.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("cannot create user %q: %w", u.Username, err)
	}
	u.ID, u.Role, u.CreatedAt = id, core.Role(gotRole), sqlutil.Time(createdNs)
	return nil
}
