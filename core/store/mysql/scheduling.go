package mysql

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
	if err := sqlutil.SetPriority(ctx, s.db, s.db, id, priority); err != nil {
		return core.Task{}, err
	}
	return s.Task(ctx, id)
}

var (
	// The row is made first so that FOR UPDATE locks a row, not a gap:
	// two masters' gap locks on a missing row would deadlock their inserts.
	usageDialect = sqlutil.UsageDialect{
		Ensure: `INSERT IGNORE INTO user_usage(user_id, gpu_seconds, as_of) VALUES (?, 0, 0)`,
		Lock:   `SELECT gpu_seconds, as_of FROM user_usage WHERE user_id = ? FOR UPDATE`,
	}
	quotaDialect = sqlutil.QuotaDialect{Upsert: `INSERT INTO user_quotas(user_id, gpus, runs) VALUES (?, ?, ?)
		ON DUPLICATE KEY UPDATE gpus = VALUES(gpus), runs = VALUES(runs)`}
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
	return sqlutil.Usage(ctx, s.db, now, halfLife)
}

// SetQuota replaces a user's quota.
func (s *Store) SetQuota(ctx context.Context, userID int64, q core.Quota) error {
	return s.inTx(ctx, func(tx *sql.Tx) error { return sqlutil.SetQuota(ctx, tx, quotaDialect, userID, q) })
}
