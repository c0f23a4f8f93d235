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

// UserCols selects a user; ScanUser reads them in this order.
const UserCols = `SELECT id, username, role, password_hash, token_version, created_at,
	disabled, deleted, last_login_at, notify_webhook, notify_on FROM users `

// ScanUser reads one row of UserCols.
func ScanUser(sc Scanner) (core.User, error) {
	var u core.User
	var role, on string
	var created int64
	var last *int64
	if err := sc.Scan(&u.ID, &u.Username, &role, &u.PasswordHash, &u.TokenVersion, &created,
		&u.Disabled, &u.Deleted, &last, &u.Notify.Webhook, &on); err != nil {
		return core.User{}, err
	}
	u.Role, u.CreatedAt, u.LastLoginAt = core.Role(role), Time(created), NullTime(last)
	if on != "" {
		u.Notify.On = strings.Split(on, ",")
	}
	return u, nil
}

// UserLookup reads the user UserCols+where finds, or core.ErrNotFound.
func UserLookup(row *sql.Row, key any) (core.User, error) {
	u, err := ScanUser(row)
	if errors.Is(err, sql.ErrNoRows) {
		return core.User{}, fmt.Errorf("cannot find user %v: %w", key, core.ErrNotFound)
	}
	if err != nil {
		return core.User{}, fmt.Errorf("cannot read user %v: %w", key, err)
	}
	return u, nil
}

// NewUser does CreateUser's checks of u and returns what the backend
// inserts: its role (USER when empty) and its creation time (now when
// zero), in unix nanoseconds.
func NewUser(u *core.User, now time.Time) (core.Role, int64, error) {
	if err := core.CheckNewUsername(u.Username); err != nil {
		return "", 0, fmt.Errorf("cannot create user %q: %w", u.Username, err)
	}
	role := u.Role
	if role == "" {
		role = core.RoleUser
	}
	if role != core.RoleUser && role != core.RoleAdmin {
		return "", 0, fmt.Errorf("cannot create user %q: unknown role %q", u.Username, role)
	}
	created := u.CreatedAt
	if created.IsZero() {
		created = now
	}
	createdNs, err := Nanos(created)
	if err != nil {
		return "", 0, fmt.Errorf("cannot create user %q: %w", u.Username, err)
	}
	return role, createdNs, nil
}

// UserByName returns the user called username, or core.ErrNotFound.
func (s *Shared) UserByName(ctx context.Context, username string) (core.User, error) {
	return s.user(ctx, "username", username)
}

// UserByID returns the user with id, or core.ErrNotFound.
func (s *Shared) UserByID(ctx context.Context, id int64) (core.User, error) {
	return s.user(ctx, "id", id)
}

// user looks a user up by one column; col is a constant of this file. It
// reads on HotRead (two constant queries): every authenticated request
// looks its user up, and on SQLite parsing the query was 7% of a submit's
// CPU.
func (s *Shared) user(ctx context.Context, col string, key any) (core.User, error) {
	return UserLookup(s.c.HotRead.QueryRowContext(ctx, UserCols+`WHERE `+col+` = ?`, key), key)
}

// BumpTokenVersion implements store.Store.
func (s *Shared) BumpTokenVersion(ctx context.Context, id int64) (int64, error) {
	var v int64
	err := s.c.InTx(ctx, func(tx *sql.Tx) error {
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

// ListUsers implements store.Store: the users' runs are summed in one pass
// over tasks.
func (s *Shared) ListUsers(ctx context.Context, now time.Time) ([]store.UserSummary, error) {
	nowNs, err := Nanos(now)
	if err != nil {
		return nil, fmt.Errorf("cannot list users: %w", err)
	}
	rows, err := s.c.Read.QueryContext(ctx, `SELECT u.id, u.username, u.role, u.password_hash, u.token_version,
		u.created_at, u.disabled, u.deleted, u.last_login_at, u.notify_webhook, u.notify_on,
		COALESCE(a.runs, 0), COALESCE(a.active, 0), COALESCE(a.gpu_seconds, 0)
		FROM users u LEFT JOIN (
			SELECT user_id, COUNT(*) AS runs,
				SUM(CASE WHEN status IN (?, ?) THEN 1 ELSE 0 END) AS active,
				SUM(CASE WHEN started_at IS NULL THEN 0
					ELSE gpus * ((COALESCE(finished_at, ?) - started_at) / 1e9) END) AS gpu_seconds
			FROM tasks GROUP BY user_id) a ON a.user_id = u.id
		WHERE u.deleted = 0 ORDER BY u.id`,
		string(core.StatusDispatched), string(core.StatusRunning), nowNs)
	if err != nil {
		return nil, fmt.Errorf("cannot list users: %w", err)
	}
	defer rows.Close()
	out := []store.UserSummary{}
	for rows.Next() {
		var us store.UserSummary
		u, err := ScanUser(scanWith{rows, []any{&us.Runs, &us.ActiveRuns, &us.GPUSeconds}})
		if err != nil {
			return nil, fmt.Errorf("cannot list users: %w", err)
		}
		us.User = u
		us.GPUSeconds = max(us.GPUSeconds, 0) // a clock set back
		out = append(out, us)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot list users: %w", err)
	}
	return out, nil
}

// scanWith scans a row of UserCols followed by more columns.
type scanWith struct {
	rows  *sql.Rows
	extra []any
}

func (s scanWith) Scan(dest ...any) error { return s.rows.Scan(append(dest, s.extra...)...) }

// Tx is a transaction as the user and usage writes need it: a *sql.Tx, or
// a backend's wrapper that runs the statements it prepared once (SQLite's
// writer).
type Tx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// activeAdmins counts the enabled admins, locking their rows with lock
// (Dialects.UserLock) so that two changes of two admins at once cannot
// each count the other.
func activeAdmins(ctx context.Context, tx Tx, lock string) (int, error) {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM users
		WHERE role = ? AND disabled = 0 AND deleted = 0`+lock, string(core.RoleAdmin)).Scan(&n)
	return n, err
}

// liveUser reads the user id for a change, locked with lock; deleted
// users are not found.
func liveUser(ctx context.Context, tx Tx, lock string, id int64) (core.User, error) {
	u, err := UserLookup(tx.QueryRowContext(ctx, UserCols+`WHERE id = ?`+lock, id), id)
	if err == nil && u.Deleted {
		err = fmt.Errorf("cannot find user %d: deleted: %w", id, core.ErrNotFound)
	}
	return u, err
}

// checkAdmins refuses to take the enabled admin u away when it is the
// last one.
func checkAdmins(ctx context.Context, tx Tx, lock string, u core.User) error {
	if u.Role != core.RoleAdmin || u.Disabled {
		return nil // not an enabled admin: nothing is taken away
	}
	n, err := activeAdmins(ctx, tx, lock)
	if err != nil {
		return err
	}
	if n <= 1 {
		return store.ErrLastAdmin
	}
	return nil
}

// UpdateUser implements store.Store.
func (s *Shared) UpdateUser(ctx context.Context, id int64, p store.UserPatch) (core.User, error) {
	var u core.User
	err := s.c.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		u, err = updateUser(ctx, tx, s.d.UserLock, id, p)
		return err
	})
	if err != nil {
		return core.User{}, fmt.Errorf("cannot change user %d: %w", id, err)
	}
	return u, nil
}

// DeleteUser implements store.Store.
func (s *Shared) DeleteUser(ctx context.Context, id int64) error {
	if err := s.c.InTx(ctx, func(tx *sql.Tx) error { return deleteUser(ctx, tx, s.d.UserLock, id) }); err != nil {
		return fmt.Errorf("cannot delete user %d: %w", id, err)
	}
	return nil
}

// updateUser is UpdateUser inside tx.
func updateUser(ctx context.Context, tx Tx, lock string, id int64, p store.UserPatch) (core.User, error) {
	if p.Role != nil && *p.Role != core.RoleUser && *p.Role != core.RoleAdmin {
		return core.User{}, fmt.Errorf("cannot change user %d: unknown role %q", id, *p.Role)
	}
	if p.PasswordHash != nil && *p.PasswordHash == "" {
		return core.User{}, fmt.Errorf("cannot change user %d: empty password hash", id)
	}
	// The admins first, then the user: every change locks rows in the
	// same order.
	if (p.Role != nil && *p.Role != core.RoleAdmin) || (p.Disabled != nil && *p.Disabled) {
		if _, err := activeAdmins(ctx, tx, lock); err != nil {
			return core.User{}, err
		}
	}
	u, err := liveUser(ctx, tx, lock, id)
	if err != nil {
		return core.User{}, err
	}
	next, bump := u, false
	if p.Role != nil && *p.Role != u.Role {
		next.Role, bump = *p.Role, true
	}
	if p.Disabled != nil && *p.Disabled != u.Disabled {
		next.Disabled = *p.Disabled
		bump = bump || next.Disabled
	}
	if p.PasswordHash != nil {
		next.PasswordHash, bump = *p.PasswordHash, true
	}
	if next.Role != core.RoleAdmin || next.Disabled {
		if err := checkAdmins(ctx, tx, lock, u); err != nil {
			return core.User{}, err
		}
	}
	if bump {
		next.TokenVersion++
	}
	_, err = tx.ExecContext(ctx, `UPDATE users SET role = ?, disabled = ?, password_hash = ?, token_version = ?
		WHERE id = ?`, string(next.Role), next.Disabled, next.PasswordHash, next.TokenVersion, id)
	if err != nil {
		return core.User{}, err
	}
	return next, nil
}

// deleteUser is DeleteUser inside tx.
func deleteUser(ctx context.Context, tx Tx, lock string, id int64) error {
	if _, err := activeAdmins(ctx, tx, lock); err != nil {
		return err
	}
	u, err := liveUser(ctx, tx, lock, id)
	if err != nil {
		return err
	}
	if err := checkAdmins(ctx, tx, lock, u); err != nil {
		return err
	}
	// The name, and its fold, are free again.
	_, err = tx.ExecContext(ctx, `UPDATE users SET username = ?, username_fold = NULL, password_hash = '', disabled = 1, deleted = 1,
		notify_webhook = '', notify_on = '', token_version = token_version + 1 WHERE id = ?`,
		core.DeletedUsername(id), id)
	return err
}

// RecordLogin implements store.Store.
func (s *Shared) RecordLogin(ctx context.Context, id int64, at time.Time) error {
	ns, err := Nanos(at)
	if err != nil {
		return fmt.Errorf("cannot record the sign-in of user %d: %w", id, err)
	}
	res, err := s.c.Write.ExecContext(ctx, `UPDATE users SET last_login_at = ? WHERE id = ?`, ns, id)
	return affected(res, err, "cannot record the sign-in of user %d", id)
}

// SetNotify implements store.Store.
func (s *Shared) SetNotify(ctx context.Context, id int64, n core.Notify) error {
	for _, on := range n.On {
		if on == "" || strings.Contains(on, ",") {
			return fmt.Errorf("cannot set the notifications of user %d: bad event %q", id, on)
		}
	}
	res, err := s.c.Write.ExecContext(ctx, `UPDATE users SET notify_webhook = ?, notify_on = ? WHERE id = ? AND deleted = 0`,
		n.Webhook, strings.Join(n.On, ","), id)
	return affected(res, err, "cannot set the notifications of user %d", id)
}

// affected turns an UPDATE of one row that matched none into
// core.ErrNotFound, and wraps err as what says.
func affected(res sql.Result, err error, what string, id int64) error {
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n == 0 {
			err = core.ErrNotFound
		}
	}
	if err != nil {
		return fmt.Errorf(what+": %w", id, err)
	}
	return nil
}
