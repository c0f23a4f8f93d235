package mysql

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

// CreateUser inserts u and sets its ID, Role and (when zero) CreatedAt. An
// empty role means USER.
//
// The first user becomes ADMIN through the UNIQUE key on first_user: while
// the table looks empty, the insert claims first_user = 1 as ADMIN; of
// several such inserts racing, InnoDB lets one commit and refuses the rest a
// duplicate key, and they insert again as ordinary users. No lock is held
// across statements, so no deadlock can arise (gap locks of an INSERT ...
// SELECT on an empty table would).
func (s *Store) CreateUser(ctx context.Context, u *core.User) error {
	role, createdNs, err := sqlutil.NewUser(u, time.Now())
	if err != nil {
		return err
	}
	var empty bool
	if err := s.db.QueryRowContext(ctx, `SELECT NOT EXISTS (SELECT 1 FROM users)`).Scan(&empty); err != nil {
		return fmt.Errorf("cannot create user %q: %w", u.Username, err)
	}
	insert := func(role core.Role, first any) (int64, error) {
		res, err := s.db.ExecContext(ctx, `INSERT INTO users (username, username_fold, role, password_hash, created_at, first_user)
			VALUES (?, ?, ?, ?, ?, ?)`, u.Username, core.UsernameFold(u.Username), string(role), u.PasswordHash, createdNs, first)
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	}
	got := role
	var id int64
	if empty {
		got = core.RoleAdmin
		id, err = insert(got, 1)
		if isErr(err, errDupEntry) && strings.Contains(err.Error(), "users_first") {
			got = role // another user was first after all
			id, err = insert(got, nil)
		}
	} else {
		id, err = insert(got, nil)
	}
	if isErr(err, errDupEntry) {
		return fmt.Errorf("cannot create user %q: username taken: %w", u.Username, core.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("cannot create user %q: %w", u.Username, err)
	}
	u.ID, u.Role, u.CreatedAt = id, got, sqlutil.Time(createdNs)
	return nil
}
