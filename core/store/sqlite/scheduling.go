package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
	"github.com/rlsched/rlsched/core/store/internal/sqlutil"
)

// SetPriority changes a QUEUED run's priority.
func (s *Store) SetPriority(ctx context.Context, id string, priority int) (core.Task, error) {
	// The check reads through the writer: a read connection may not see
	// the write's outcome yet.
	if err := sqlutil.SetPriority(ctx, s.w, s.w, id, priority); err != nil {
		return core.Task{}, err
	}
	return s.Task(ctx, id)
}

var (
	usageDialect = sqlutil.UsageDialect{
		Ensure: `INSERT OR IGNORE INTO user_usage(user_id, gpu_seconds, as_of) VALUES (?, 0, 0)`,
		// The writer's transaction holds the database: no row lock needed.
		Lock: `SELECT gpu_seconds, as_of FROM user_usage WHERE user_id = ?`,
	}
	quotaDialect = sqlutil.QuotaDialect{Upsert: `INSERT INTO user_quotas(user_id, gpus, runs) VALUES (?, ?, ?)
		ON CONFLICT(user_id) DO UPDATE SET gpus = excluded.gpus, runs = excluded.runs`}
)

// AddUsage adds the charges to their users' usage in one transaction.
func (s *Store) AddUsage(ctx context.Context, cs []store.UsageCharge, halfLife time.Duration) error {
	if len(cs) == 0 {
		return nil
	}
	return s.inTx(ctx, func(tx *sql.Tx) error { return sqlutil.AddUsage(ctx, tx, usageDialect, cs, halfLife) })
}

// Usage returns every user's standing at now.
func (s *Store) Usage(ctx context.Context, now time.Time, halfLife time.Duration) ([]store.UserUsage, error) {
	return sqlutil.Usage(ctx, s.r, now, halfLife)
}

// SetQuota replaces a user's quota.
func (s *Store) SetQuota(ctx context.Context, userID int64, q core.Quota) error {
	return s.inTx(ctx, func(tx *sql.Tx) error { return sqlutil.SetQuota(ctx, tx, quotaDialect, userID, q) })
}
