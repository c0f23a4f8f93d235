package sqlutil

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// Execer runs a statement: the writer pool or a transaction.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// RowQuerier reads one row.
type RowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// The statements of AddUsage that are the same in every dialect, for a
// backend to prepare.
const (
	UsageUserKnown = `SELECT COUNT(*) FROM users WHERE id = ?`
	UsageWrite     = `UPDATE user_usage SET gpu_seconds = ?, as_of = ? WHERE user_id = ?`
)

// SetPriority changes a QUEUED run's priority (store.Scheduling). Both the
// write and the look that tells an unknown run (core.ErrNotFound) from one
// that left the queue (core.ErrConflict) are on Write: a read connection
// may not see the write's outcome yet.
func (s *Shared) SetPriority(ctx context.Context, id string, priority int) (core.Task, error) {
	if err := setPriority(ctx, s.c.Write, id, priority); err != nil {
		return core.Task{}, err
	}
	return s.Task(ctx, id)
}

func setPriority(ctx context.Context, db Conn, id string, priority int) error {
	res, err := db.ExecContext(ctx, `UPDATE tasks SET priority = ?, updated_at = ? WHERE id = ? AND status = 'QUEUED'`,
		priority, time.Now().UnixNano(), id)
	if err != nil {
		return fmt.Errorf("cannot set the priority of run %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	var status string
	err = db.QueryRowContext(ctx, `SELECT status FROM tasks WHERE id = ?`, id).Scan(&status)
	switch {
	case err == sql.ErrNoRows:
		return fmt.Errorf("cannot set the priority of run %s: %w", id, core.ErrNotFound)
	case err != nil:
		return fmt.Errorf("cannot set the priority of run %s: %w", id, err)
	}
	return fmt.Errorf("cannot set the priority of run %s: it is %s, not QUEUED: %w", id, status, core.ErrConflict)
}

// UsageDialect is the two statements AddUsage spells per backend: one that
// makes sure a user's usage row exists without changing one that does
// (INSERT OR IGNORE / INSERT IGNORE; args user_id), and one that reads it
// locked for the transaction (args user_id).
type UsageDialect struct {
	Ensure, Lock string
}

// AddUsage adds the charges to their users' usage in one transaction
// (store.Scheduling).
func (s *Shared) AddUsage(ctx context.Context, cs []store.UsageCharge, halfLife time.Duration) error {
	if len(cs) == 0 {
		return nil
	}
	return s.c.InTx(ctx, func(tx *sql.Tx) error { return addUsage(ctx, tx, s.d.Usage, cs, halfLife) })
}

// addUsage adds the charges to their users' usage in tx.
// Each row is (gpu_seconds at as_of); a charge at or after as_of decays the
// row to the charge's instant and adds it, an earlier one is added decayed
// to as_of, so the order charges arrive in does not matter. The charges of
// one user are first summed into one at the latest of their instants
// (decay is linear), so a batch costs each user's row one read and one
// write however many of their runs ended in it; users are locked in id
// order, so concurrent batches cannot deadlock on them.
func addUsage(ctx context.Context, tx Tx, d UsageDialect, cs []store.UsageCharge, halfLife time.Duration) error {
	for _, c := range sumByUser(cs, halfLife) {
		var known int
		if err := tx.QueryRowContext(ctx, UsageUserKnown, c.UserID).Scan(&known); err != nil {
			return fmt.Errorf("cannot add usage: %w", err)
		}
		if known == 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, d.Ensure, c.UserID); err != nil {
			return fmt.Errorf("cannot add usage: %w", err)
		}
		var v float64
		var asOf int64
		if err := tx.QueryRowContext(ctx, d.Lock, c.UserID).Scan(&v, &asOf); err != nil {
			return fmt.Errorf("cannot add usage: %w", err)
		}
		at, err := Nanos(c.At)
		if err != nil {
			return fmt.Errorf("cannot add usage: %w", err)
		}
		if at >= asOf {
			v = core.Decay(v, time.Duration(at-asOf), halfLife) + c.GPUSeconds
			asOf = at
		} else {
			v += core.Decay(c.GPUSeconds, time.Duration(asOf-at), halfLife)
		}
		if _, err := tx.ExecContext(ctx, UsageWrite, v, asOf, c.UserID); err != nil {
			return fmt.Errorf("cannot add usage: %w", err)
		}
	}
	return nil
}

// sumByUser is one charge per user of cs, by user id: their valid charges
// decayed to the latest instant among them and added.
func sumByUser(cs []store.UsageCharge, halfLife time.Duration) []store.UsageCharge {
	var out []store.UsageCharge
	at := map[int64]int{}
	for _, c := range cs {
		if c.GPUSeconds <= 0 || math.IsNaN(c.GPUSeconds) || math.IsInf(c.GPUSeconds, 0) {
			continue
		}
		i, ok := at[c.UserID]
		if !ok {
			at[c.UserID] = len(out)
			out = append(out, c)
			continue
		}
		s := &out[i]
		if c.At.After(s.At) {
			s.GPUSeconds = core.Decay(s.GPUSeconds, c.At.Sub(s.At), halfLife) + c.GPUSeconds
			s.At = c.At
		} else {
			s.GPUSeconds += core.Decay(c.GPUSeconds, s.At.Sub(c.At), halfLife)
		}
	}
	slices.SortFunc(out, func(a, b store.UsageCharge) int { return cmp.Compare(a.UserID, b.UserID) })
	return out
}

// ApplyCharges adds, in tx, the charge of every update of us that applied
// (errs[i] == nil): store.Update.Charge.
func ApplyCharges(ctx context.Context, tx Tx, d UsageDialect, us []store.Update, errs []error) error {
	var cs []store.UsageCharge
	var halfLife time.Duration
	for i, u := range us {
		if u.Charge == nil || errs[i] != nil {
			continue
		}
		if len(cs) > 0 && u.ChargeHalfLife != halfLife {
			// One master writes with one half-life; a batch that mixes
			// them adds what it has so far first.
			if err := addUsage(ctx, tx, d, cs, halfLife); err != nil {
				return err
			}
			cs = cs[:0]
		}
		cs, halfLife = append(cs, *u.Charge), u.ChargeHalfLife
	}
	if len(cs) == 0 {
		return nil
	}
	return addUsage(ctx, tx, d, cs, halfLife)
}

// activeNodes is an active run's members, from its placement_json (a
// multi-node group's nodes, absent for one worker): each member holds the
// run's GPUs and cores, so usage and the active GPUs count them all. Both
// backends read JSON_EXTRACT's number (MariaDB's text is cast by the
// arithmetic).
const activeNodes = `COALESCE(CASE WHEN placement_json LIKE '%"nodes":%' THEN JSON_EXTRACT(placement_json, '$.nodes') END, 1)`

// Usage returns every user's standing at now (store.Scheduling).
func (s *Shared) Usage(ctx context.Context, now time.Time, halfLife time.Duration) ([]store.UserUsage, error) {
	nowNs, err := Nanos(now)
	if err != nil {
		return nil, fmt.Errorf("cannot read usage: %w", err)
	}
	rows, err := s.c.Read.QueryContext(ctx, `SELECT u.id, u.username, COALESCE(g.gpu_seconds, 0), COALESCE(g.as_of, 0),
		COALESCE(a.gpus, 0), COALESCE(a.runs, 0), COALESCE(a.running, 0), q.gpus, q.runs
		FROM users u
		LEFT JOIN user_usage g ON g.user_id = u.id
		LEFT JOIN user_quotas q ON q.user_id = u.id
		LEFT JOIN (
			SELECT user_id, SUM((gpus + gpu_fraction) * nodes) AS gpus, COUNT(*) AS runs,
				SUM(nodes * CASE WHEN started_at IS NULL OR started_at > ? THEN 0
					WHEN gpu_fraction > 0 THEN gpu_fraction * ((? - started_at) / 1e9)
					WHEN gpus = 0 THEN ? * (CASE WHEN cpus > 0 THEN cpus ELSE 1 END) * ((? - started_at) / 1e9)
					ELSE gpus * ((? - started_at) / 1e9) END) AS running
			FROM (SELECT user_id, gpus, gpu_fraction, cpus, started_at,
				`+activeNodes+` AS nodes
				FROM tasks WHERE status IN ('DISPATCHED', 'RUNNING')) t GROUP BY user_id) a ON a.user_id = u.id
		WHERE u.deleted = 0 ORDER BY u.id`, nowNs, nowNs, core.CPURunWeight, nowNs, nowNs)
	if err != nil {
		return nil, fmt.Errorf("cannot read usage: %w", err)
	}
	defer rows.Close()
	out := []store.UserUsage{}
	for rows.Next() {
		var u store.UserUsage
		var v, running, gpus float64
		var asOf int64
		var qg, qr sql.NullInt64
		if err := rows.Scan(&u.UserID, &u.User, &v, &asOf, &gpus, &u.ActiveRuns, &running, &qg, &qr); err != nil {
			return nil, fmt.Errorf("cannot read usage: %w", err)
		}
		// Shares of GPUs count whole toward the quota's GPUs (issue 28):
		// 0.25 + 0.25 active hold 1 of a quota of 2.
		u.ActiveGPUs = int(math.Ceil(gpus - 1e-9))
		// A row from the future (another master's clock ahead) counts as now.
		u.Usage = core.Decay(v, time.Duration(max(nowNs-asOf, 0)), halfLife) + max(running, 0)
		if qg.Valid {
			n := int(qg.Int64)
			u.Quota.GPUs = &n
		}
		if qr.Valid {
			n := int(qr.Int64)
			u.Quota.Runs = &n
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read usage: %w", err)
	}
	return out, nil
}

// QuotaDialect is SetQuota's upsert per backend: args user_id, gpus, runs
// (NULL: no cap).
type QuotaDialect struct{ Upsert string }

// SetQuota replaces a user's quota (store.Scheduling).
func (s *Shared) SetQuota(ctx context.Context, userID int64, q core.Quota) error {
	return s.c.InTx(ctx, func(tx *sql.Tx) error { return setQuota(ctx, tx, s.d.Quota, userID, q) })
}

// setQuota is SetQuota in tx.
func setQuota(ctx context.Context, tx *sql.Tx, d QuotaDialect, userID int64, q core.Quota) error {
	var known int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM users WHERE id = ? AND deleted = 0`, userID).Scan(&known); err != nil {
		return fmt.Errorf("cannot set the quota of user %d: %w", userID, err)
	}
	if known == 0 {
		return fmt.Errorf("cannot set the quota of user %d: %w", userID, core.ErrNotFound)
	}
	arg := func(p *int) any {
		if p == nil {
			return nil
		}
		if *p < 0 {
			return 0
		}
		return int64(*p)
	}
	if _, err := tx.ExecContext(ctx, d.Upsert, userID, arg(q.GPUs), arg(q.Runs)); err != nil {
		return fmt.Errorf("cannot set the quota of user %d: %w", userID, err)
	}
	return nil
}
