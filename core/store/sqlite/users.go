package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
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
	var u core.User
	var role string
	var created int64
	// Prepared once (two constant queries): every authenticated request
	// looks its user up, and parsing the query was 7% of a submit's CPU.
	err := s.rs.QueryRowContext(ctx,
		`SELECT id, username, role, password_hash, token_version, created_at FROM users WHERE `+col+` = ?`, key).
		Scan(&u.ID, &u.Username, &role, &u.PasswordHash, &u.TokenVersion, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return core.User{}, fmt.Errorf("cannot find user %v: %w", key, core.ErrNotFound)
	}
	if err != nil {
		return core.User{}, fmt.Errorf("cannot read user %v: %w", key, err)
	}
	u.Role, u.CreatedAt = core.Role(role), sqlutil.Time(created)
	return u, nil
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

// SetUserRole implements store.Store.
func (s *Store) SetUserRole(ctx context.Context, id int64, role core.Role) error {
	if role != core.RoleUser && role != core.RoleAdmin {
		return fmt.Errorf("cannot set the role of user %d: unknown role %q", id, role)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM users WHERE id = ?`, id).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return core.ErrNotFound
		}
		_, err := tx.ExecContext(ctx, `UPDATE users SET role = ?, token_version = token_version + 1
			WHERE id = ? AND role <> ?`, string(role), id, string(role))
		return err
	})
	if err != nil {
		return fmt.Errorf("cannot set the role of user %d: %w", id, err)
	}
	return nil
}
