package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
	"github.com/rlsched/rlsched/core/store/internal/sqlutil"
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
	if !core.ValidUsername(u.Username) {
		return fmt.Errorf("cannot create user %q: a username is 3–32 of [A-Za-z0-9_.-]", u.Username)
	}
	role := u.Role
	if role == "" {
		role = core.RoleUser
	}
	if role != core.RoleUser && role != core.RoleAdmin {
		return fmt.Errorf("cannot create user %q: unknown role %q", u.Username, role)
	}
	created := u.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	createdNs, err := sqlutil.Nanos(created)
	if err != nil {
		return fmt.Errorf("cannot create user %q: %w", u.Username, err)
	}
	var empty bool
	if err := s.db.QueryRowContext(ctx, `SELECT NOT EXISTS (SELECT 1 FROM users)`).Scan(&empty); err != nil {
		return fmt.Errorf("cannot create user %q: %w", u.Username, err)
	}
	insert := func(role core.Role, first any) (int64, error) {
		res, err := s.db.ExecContext(ctx, `INSERT INTO users (username, role, password_hash, created_at, first_user)
			VALUES (?, ?, ?, ?, ?)`, u.Username, string(role), u.PasswordHash, createdNs, first)
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

// UserByName returns the user called username, or core.ErrNotFound.
func (s *Store) UserByName(ctx context.Context, username string) (core.User, error) {
	return s.user(ctx, "username", username)
}

// UserByID returns the user with id, or core.ErrNotFound.
func (s *Store) UserByID(ctx context.Context, id int64) (core.User, error) {
	return s.user(ctx, "id", id)
}

// user looks a user up by one column; col is a constant of this file.
func (s *Store) user(ctx context.Context, col string, key any) (core.User, error) {
	return sqlutil.UserLookup(s.db.QueryRowContext(ctx, sqlutil.UserCols+`WHERE `+col+` = ?`, key), key)
}

// BumpTokenVersion implements store.Store.
func (s *Store) BumpTokenVersion(ctx context.Context, id int64) (int64, error) {
	var v int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE users SET token_version = token_version + 1 WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = core.ErrNotFound
			}
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT token_version FROM users WHERE id = ?`, id).Scan(&v)
	})
	if err != nil {
		return 0, fmt.Errorf("cannot revoke the tokens of user %d: %w", id, err)
	}
	return v, nil
}

// ListUsers implements store.Store.
func (s *Store) ListUsers(ctx context.Context, now time.Time) ([]store.UserSummary, error) {
	return sqlutil.ListUsers(ctx, s.db, now)
}

// forUpdate locks the rows a change of users reads: of two changes of two
// admins at once, the second waits for the first and counts what it left.
const forUpdate = " FOR UPDATE"

// UpdateUser implements store.Store.
func (s *Store) UpdateUser(ctx context.Context, id int64, p store.UserPatch) (core.User, error) {
	var u core.User
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		u, err = sqlutil.UpdateUser(ctx, tx, forUpdate, id, p)
		return err
	})
	if err != nil {
		return core.User{}, fmt.Errorf("cannot change user %d: %w", id, err)
	}
	return u, nil
}

// DeleteUser implements store.Store.
func (s *Store) DeleteUser(ctx context.Context, id int64) error {
	if err := s.inTx(ctx, func(tx *sql.Tx) error { return sqlutil.DeleteUser(ctx, tx, forUpdate, id) }); err != nil {
		return fmt.Errorf("cannot delete user %d: %w", id, err)
	}
	return nil
}

// RecordLogin implements store.Store.
func (s *Store) RecordLogin(ctx context.Context, id int64, at time.Time) error {
	return sqlutil.RecordLogin(ctx, s.db, id, at)
}

// SetNotify implements store.Store.
func (s *Store) SetNotify(ctx context.Context, id int64, n core.Notify) error {
	return sqlutil.SetNotify(ctx, s.db, id, n)
}
