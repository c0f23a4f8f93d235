package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
	"github.com/rlsched/rlsched/core/store/internal/sqlutil"
)

// CreateUser inserts u and sets its ID, Role and (when zero) CreatedAt. The
// role is decided inside the INSERT itself, so of two first users created at
// once only one becomes ADMIN. An empty role means USER.
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
	var id int64
	var gotRole string
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `INSERT INTO users(username, role, password_hash, created_at)
			SELECT ?, CASE WHEN EXISTS (SELECT 1 FROM users) THEN ? ELSE 'ADMIN' END, ?, ?
			RETURNING id, role`,
			u.Username, string(role), u.PasswordHash, createdNs).Scan(&id, &gotRole)
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
	// Prepared once (two constant queries): every authenticated request
	// looks its user up, and parsing the query was 7% of a submit's CPU.
	return sqlutil.UserLookup(s.rs.QueryRowContext(ctx, sqlutil.UserCols+`WHERE `+col+` = ?`, key), key)
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
	return sqlutil.ListUsers(ctx, s.r, now)
}

// UpdateUser implements store.Store. SQLite has one writer, so the
// transaction alone serialises changes of admins.
func (s *Store) UpdateUser(ctx context.Context, id int64, p store.UserPatch) (core.User, error) {
	var u core.User
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		u, err = sqlutil.UpdateUser(ctx, tx, "", id, p)
		return err
	})
	if err != nil {
		return core.User{}, fmt.Errorf("cannot change user %d: %w", id, err)
	}
	return u, nil
}

// DeleteUser implements store.Store.
func (s *Store) DeleteUser(ctx context.Context, id int64) error {
	if err := s.inTx(ctx, func(tx *sql.Tx) error { return sqlutil.DeleteUser(ctx, tx, "", id) }); err != nil {
		return fmt.Errorf("cannot delete user %d: %w", id, err)
	}
	return nil
}

// RecordLogin implements store.Store.
func (s *Store) RecordLogin(ctx context.Context, id int64, at time.Time) error {
	return sqlutil.RecordLogin(ctx, s.w, id, at)
}

// SetNotify implements store.Store.
func (s *Store) SetNotify(ctx context.Context, id int64, n core.Notify) error {
	return sqlutil.SetNotify(ctx, s.w, id, n)
}
