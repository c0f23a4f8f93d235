package mysql

import (
	"context"
	"crypto/sha1"
	"database/sql"
	"encoding/hex"
	"fmt"
	"time"
)

// migrations are applied in order; migration i has version i+1. Never edit or
// reorder an entry that has shipped: append a new one instead, since an
// existing database records only the versions it applied.
//
// MySQL commits every DDL statement by itself, so a migration cannot be
// rolled back half-way: each statement must be safe to run again (IF NOT
// EXISTS, indexes declared inside CREATE TABLE), so that a master that died
// mid-migration leaves a database the next one can finish.
//
// The schema mirrors sqlite's: times are unix nanoseconds (BIGINT);
// command, env, tags, gpu_indices and params are JSON text, never NULL
// except params; strings are utf8mb4_bin so they compare and sort byte-wise
// as in SQLite. Free-form strings that are keys or filters (project, metric
// name) are VARBINARY: a _bin collation still pads, so "loss" and "loss "
// would be one key, and binary strings do not.
var migrations = [][]string{
	// 1: users, runs and metrics.
	{
		// first_user is 1 on the first user and NULL on every other: the
		// UNIQUE key lets exactly one insert claim it, however many race.
		`CREATE TABLE IF NOT EXISTS users (
			id            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
			username      VARCHAR(64)  NOT NULL,
			role          VARCHAR(16)  NOT NULL,
			password_hash VARCHAR(255) NOT NULL,
			created_at    BIGINT       NOT NULL,
			first_user    TINYINT      NULL,
			UNIQUE KEY users_username (username),
			UNIQUE KEY users_first (first_user)
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`CREATE TABLE IF NOT EXISTS tasks (
			id              VARCHAR(64)  NOT NULL PRIMARY KEY,
			name            TEXT         NOT NULL,
			project         VARBINARY(1024) NOT NULL,
			user_id         BIGINT       NOT NULL,
			status          VARCHAR(16)  NOT NULL,
			attempt         INT          NOT NULL,
			max_retries     INT          NOT NULL,
			command         MEDIUMTEXT   NOT NULL,
			params          MEDIUMTEXT   NULL,
			gpus            INT          NOT NULL,
			priority        INT          NOT NULL,
			env             MEDIUMTEXT   NOT NULL,
			tags            TEXT         NOT NULL,
			workdir         TEXT         NOT NULL,
			worker          VARCHAR(255) NOT NULL,
			gpu_indices     TEXT         NOT NULL,
			trace_id        VARCHAR(255) NOT NULL,
			exit_code       INT          NULL,
			error           MEDIUMTEXT   NOT NULL,
			final_reward    DOUBLE       NULL,
			git_commit      VARCHAR(255) NOT NULL,
			git_dirty       BOOLEAN      NOT NULL,
			timeout_seconds BIGINT       NOT NULL,
			created_at      BIGINT       NOT NULL,
			started_at      BIGINT       NULL,
			finished_at     BIGINT       NULL,
			updated_at      BIGINT       NOT NULL,
			fence           BIGINT       NOT NULL,
			-- QueuedTasks: status = 'QUEUED' ORDER BY priority DESC,
			-- created_at, id, read in index order with no sort.
			KEY tasks_queue (status, priority DESC, created_at, id),
			-- ListTasks newest first, alone or filtered by status, owner or
			-- project (read backwards).
			KEY tasks_newest (created_at, id),
			KEY tasks_status_newest (status, created_at, id),
			KEY tasks_user_newest (user_id, created_at, id),
			KEY tasks_project_newest (project, created_at, id),
			-- MaxFence, when a lease backend lost its counter.
			KEY tasks_fence (fence),
			CONSTRAINT tasks_user FOREIGN KEY (user_id) REFERENCES users (id)
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		// One value per (run, series, step): a resent metric replaces
		// itself, and the key is the index that reads a series in step order.
		`CREATE TABLE IF NOT EXISTS metrics (
			task_id VARCHAR(64)  NOT NULL,
			name    VARBINARY(1024) NOT NULL,
			step    BIGINT       NOT NULL,
			value   DOUBLE       NOT NULL,
			PRIMARY KEY (task_id, name, step),
			CONSTRAINT metrics_task FOREIGN KEY (task_id) REFERENCES tasks (id) ON DELETE CASCADE
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	},
	// 2: cancel requests, apart from the run row so that recording one is
	// not a state change of the run (masters check it on re-adoption).
	{
		`CREATE TABLE IF NOT EXISTS cancel_requests (
			task_id      VARCHAR(64) NOT NULL PRIMARY KEY,
			requested_at BIGINT      NOT NULL,
			CONSTRAINT cancel_requests_task FOREIGN KEY (task_id) REFERENCES tasks (id) ON DELETE CASCADE
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	},
	// 3: a user's token version, stamped into tokens and raised to revoke
	// them (logout, a change of role). MySQL 8 has no ADD COLUMN IF NOT
	// EXISTS: migrate treats "duplicate column" as done.
	{
		`ALTER TABLE users ADD COLUMN token_version BIGINT NOT NULL DEFAULT 0`,
	},
	// 4: a run's code beyond its commit: the remote, the stored diff (by
	// content: a rerun or a sweep's members share one copy) or why it was
	// not stored (sqlutil/codediff.go).
	{
		`ALTER TABLE tasks ADD COLUMN git_remote VARCHAR(1024) NOT NULL DEFAULT ''`,
		`ALTER TABLE tasks ADD COLUMN diff_id VARCHAR(64) NOT NULL DEFAULT ''`,
		`ALTER TABLE tasks ADD COLUMN diff_omitted VARCHAR(255) NOT NULL DEFAULT ''`,
		`CREATE TABLE IF NOT EXISTS code_diffs (
			id         VARCHAR(64) NOT NULL PRIMARY KEY,
			diff       LONGBLOB    NOT NULL,
			created_at BIGINT      NOT NULL
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	},
	// 5: user administration and notifications (issue 18), one column a
	// statement so that each is safe to run again. A deleted user keeps
	// its row (its runs' owner) under core.DeletedUsername.
	{
		`ALTER TABLE users ADD COLUMN disabled BOOLEAN NOT NULL DEFAULT FALSE`,
		`ALTER TABLE users ADD COLUMN deleted BOOLEAN NOT NULL DEFAULT FALSE`,
		`ALTER TABLE users ADD COLUMN last_login_at BIGINT NULL`,
		`ALTER TABLE users ADD COLUMN notify_webhook VARCHAR(2048) NOT NULL DEFAULT ''`,
		`ALTER TABLE users ADD COLUMN notify_on VARCHAR(512) NOT NULL DEFAULT ''`,
	},
	// 6: sweeps and finding runs again, as sqlite's migration 7. The
	// columns and their indexes are one ALTER (InnoDB applies it whole or
	// not at all), so a second run meets "duplicate column" and is done.
	// tasks_sweep_status serves SweepLimits (MySQL has no partial index).
	{
		`ALTER TABLE tasks
			ADD COLUMN sweep_id VARCHAR(64) NOT NULL DEFAULT '',
			ADD COLUMN rerun_of VARCHAR(64) NOT NULL DEFAULT '',
			ADD KEY tasks_sweep_newest (sweep_id, created_at, id),
			ADD KEY tasks_sweep_status (sweep_id, status),
			ADD KEY tasks_rerun_of (rerun_of, created_at, id)`,
		`CREATE TABLE IF NOT EXISTS sweeps (
			id           VARCHAR(64)     NOT NULL PRIMARY KEY,
			name         TEXT            NOT NULL,
			project      VARBINARY(1024) NOT NULL,
			user_id      BIGINT          NOT NULL,
			max_parallel INT             NOT NULL,
			members      INT             NOT NULL,
			spec         MEDIUMTEXT      NOT NULL,
			created_at   BIGINT          NOT NULL,
			KEY sweeps_newest (created_at, id),
			KEY sweeps_user_newest (user_id, created_at, id),
			CONSTRAINT sweeps_user FOREIGN KEY (user_id) REFERENCES users (id)
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`CREATE TABLE IF NOT EXISTS sweep_members (
			sweep_id VARCHAR(64) NOT NULL,
			member   INT         NOT NULL,
			task_id  VARCHAR(64) NOT NULL,
			PRIMARY KEY (sweep_id, member),
			CONSTRAINT sweep_members_sweep FOREIGN KEY (sweep_id) REFERENCES sweeps (id)
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`CREATE TABLE IF NOT EXISTS metric_packs (
			task_id VARCHAR(64)     NOT NULL,
			name    VARBINARY(1024) NOT NULL,
			points  INT             NOT NULL,
			data    MEDIUMBLOB      NOT NULL,
			PRIMARY KEY (task_id, name),
			-- A sweep's version reads the packs' points from here, not
			-- from the rows that hold the series.
			KEY metric_packs_points (task_id, name, points),
			CONSTRAINT metric_packs_task FOREIGN KEY (task_id) REFERENCES tasks (id) ON DELETE CASCADE
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	},
	// 7: run outputs (issue 14): the run a run resumes from, its warnings
	// (a JSON array that AddWarning appends to and no UpdateTask writes;
	// NULL is none) and the artifact index, one row per (run, path,
	// attempt). Paths are VARBINARY like every free-form key.
	{
		`ALTER TABLE tasks ADD COLUMN resume_from VARCHAR(64) NOT NULL DEFAULT ''`,
		`ALTER TABLE tasks ADD COLUMN warnings MEDIUMTEXT NULL`,
		`CREATE TABLE IF NOT EXISTS artifacts (
			task_id     VARCHAR(64)     NOT NULL,
			path        VARBINARY(1024) NOT NULL,
			attempt     INT             NOT NULL,
			size        BIGINT          NOT NULL,
			sha256      CHAR(64)        NOT NULL,
			modified_at BIGINT          NOT NULL,
			stored_at   BIGINT          NOT NULL,
			PRIMARY KEY (task_id, path, attempt),
			CONSTRAINT artifacts_task FOREIGN KEY (task_id) REFERENCES tasks (id) ON DELETE CASCADE
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	},
	// 8: the scheduling policy (issue 15), as sqlite's migration 9.
	{
		`CREATE TABLE IF NOT EXISTS user_usage (
			user_id     BIGINT NOT NULL PRIMARY KEY,
			gpu_seconds DOUBLE NOT NULL,
			as_of       BIGINT NOT NULL,
			CONSTRAINT user_usage_user FOREIGN KEY (user_id) REFERENCES users (id)
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`CREATE TABLE IF NOT EXISTS user_quotas (
			user_id BIGINT NOT NULL PRIMARY KEY,
			gpus    INT    NULL,
			runs    INT    NULL,
			CONSTRAINT user_quotas_user FOREIGN KEY (user_id) REFERENCES users (id)
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	},
	// 9: preemption (issue 15), as sqlite's migration 10: one ALTER, so a
	// second run meets "duplicate column" and is done.
	{
		`ALTER TABLE tasks
			ADD COLUMN preemptible BOOLEAN NOT NULL DEFAULT FALSE,
			ADD COLUMN preempt_grace INT NOT NULL DEFAULT 0,
			ADD COLUMN preemptions INT NOT NULL DEFAULT 0,
			ADD COLUMN preempted_at BIGINT NULL`,
	},
	// 10: usernames unique regardless of case (issue 25), as sqlite's
	// migration 11. The column and its key in one ALTER (a second run meets
	// "duplicate column"); the backfill is idempotent. LOWER needs text, and
	// usernames are ASCII.
	{
		`ALTER TABLE users ADD COLUMN username_fold VARCHAR(64) NULL, ADD UNIQUE KEY users_fold (username_fold)`,
		`UPDATE users u JOIN (SELECT MIN(id) AS id FROM users WHERE deleted = 0
			GROUP BY LOWER(CONVERT(username USING utf8mb4))) f ON u.id = f.id
			SET u.username_fold = LOWER(CONVERT(u.username USING utf8mb4))`,
	},
	// 11: wave 3's run fields, as sqlite's migration 12, in one ALTER.
	{
		`ALTER TABLE tasks
			ADD COLUMN cpus DOUBLE NOT NULL DEFAULT 0,
			ADD COLUMN memory_mb BIGINT NOT NULL DEFAULT 0,
			ADD COLUMN private BOOLEAN NOT NULL DEFAULT FALSE,
			ADD COLUMN kind VARCHAR(16) NOT NULL DEFAULT 'batch',
			ADD COLUMN reason VARCHAR(64) NOT NULL DEFAULT '',
			ADD COLUMN usage_json TEXT NULL,
			ADD COLUMN error_tail TEXT NULL,
			ADD COLUMN note TEXT NULL,
			ADD COLUMN baseline BOOLEAN NOT NULL DEFAULT FALSE`,
	},
	// 12: the queue's runs by owner and sweep, as sqlite's migration 13.
	{
		`ALTER TABLE tasks ADD KEY tasks_queue_groups (status, user_id, sweep_id, priority DESC, created_at, id)`,
	},
	// 13: a run's history, as sqlite's migration 14. MEDIUMTEXT: 100
	// entries with their reasons can pass TEXT's 64 KiB.
	{`ALTER TABLE tasks ADD COLUMN history MEDIUMTEXT NULL`},
	// 14 (issue 28): where a run may go, as sqlite's migration 15.
	{`ALTER TABLE tasks ADD COLUMN gpu_fraction DOUBLE NOT NULL DEFAULT 0,
		ADD COLUMN placement_json TEXT NULL`},
	// 15 (issue 29): dependencies and pipelines, as sqlite's migration 16.
	// The queue's keys gain waiting after status (new names, so a second
	// run meets "duplicate key"): a waiting run is outside the range
	// (status 'QUEUED', waiting 0) the window reads. tasks_queue and
	// tasks_queue_groups stay (DROP KEY could not run twice).
	{
		`ALTER TABLE tasks
			ADD COLUMN waiting BOOLEAN NOT NULL DEFAULT FALSE,
			ADD COLUMN deps MEDIUMTEXT NULL,
			ADD KEY tasks_ready (status, waiting, priority DESC, created_at, id),
			ADD KEY tasks_ready_groups (status, waiting, user_id, sweep_id, priority DESC, created_at, id)`,
		`CREATE TABLE IF NOT EXISTS task_deps (
			child_id  VARCHAR(64) NOT NULL,
			parent_id VARCHAR(64) NOT NULL,
			cond      VARCHAR(16) NOT NULL,
			PRIMARY KEY (child_id, parent_id),
			KEY task_deps_parent (parent_id, child_id)
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`CREATE TABLE IF NOT EXISTS pipelines (
			id         VARCHAR(64) NOT NULL PRIMARY KEY,
			name       TEXT        NOT NULL,
			user_id    BIGINT      NOT NULL,
			created_at BIGINT      NOT NULL,
			CONSTRAINT pipelines_user FOREIGN KEY (user_id) REFERENCES users (id)
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`CREATE TABLE IF NOT EXISTS pipeline_steps (
			pipeline_id VARCHAR(64) NOT NULL,
			idx         INT         NOT NULL,
			name        VARCHAR(128) NOT NULL,
			run_id      VARCHAR(64) NOT NULL,
			PRIMARY KEY (pipeline_id, idx),
			CONSTRAINT pipeline_steps_pipeline FOREIGN KEY (pipeline_id) REFERENCES pipelines (id) ON DELETE CASCADE
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	},
	// 16 (issue 27): a run's Python environment, as sqlite's migration 17.
	{`ALTER TABLE tasks ADD COLUMN python_env TEXT NULL`},
	// 17 (issue 27): a run's code snapshot, as sqlite's migration 18.
	// Subdir: a snapshot path, at most codetree.MaxPathBytes.
	{`ALTER TABLE tasks ADD COLUMN code_tree CHAR(64) NOT NULL DEFAULT '',
		ADD COLUMN code_subdir TEXT NULL`},
	// 18 (issue 35): an early-stopping sweep's rung decisions, as sqlite's
	// migration 19.
	{`CREATE TABLE IF NOT EXISTS sweep_decisions (
		sweep_id   VARCHAR(64) NOT NULL,
		task_id    VARCHAR(64) NOT NULL,
		rung       INT         NOT NULL,
		step       BIGINT      NOT NULL,
		value      DOUBLE      NOT NULL,
		cut        DOUBLE      NOT NULL,
		peers      INT         NOT NULL,
		stop       TINYINT(1)  NOT NULL,
		decided_at BIGINT      NOT NULL,
		PRIMARY KEY (task_id, rung),
		KEY sweep_decisions_sweep (sweep_id, rung)
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`},
	// 19 (issue 32): a run's pipeline, as sqlite's migration 20.
	{`ALTER TABLE pipeline_steps ADD KEY pipeline_steps_run (run_id)`},
	// 20 (issue 30): a point's time, as sqlite's migration 21.
	{`ALTER TABLE metrics ADD COLUMN t BIGINT NULL`},
}

// migrateLockWait is how long Open waits for another master's migration.
const migrateLockWait = 60 // seconds

// migrate applies every migration the database has not recorded. Masters
// opening one database at once serialise on a named lock (GET_LOCK), held
// by one connection for the whole migration, so none applies a migration
// twice or reads a half-migrated schema.
func (s *Store) migrate(ctx context.Context, dbName string) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("cannot migrate mysql store: %w", err)
	}
	defer conn.Close()
	// GET_LOCK names are at most 64 characters and server-wide, so the
	// database's name goes in hashed.
	sum := sha1.Sum([]byte(dbName))
	lock := "rlsched.migrate." + hex.EncodeToString(sum[:12])
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, lock, migrateLockWait).Scan(&got); err != nil {
		return fmt.Errorf("cannot take the migration lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return fmt.Errorf("cannot take the migration lock: another process held it for %ds; is a master stuck migrating?", migrateLockWait)
	}
	defer func() {
		// A fresh context: the lock must go even when ctx has ended (the
		// connection's close would drop it too).
		_, _ = conn.ExecContext(context.Background(), `SELECT RELEASE_LOCK(?)`, lock)
	}()

	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INT    NOT NULL PRIMARY KEY,
		applied_at BIGINT NOT NULL
	) ENGINE=InnoDB`); err != nil {
		return fmt.Errorf("cannot create schema_migrations: %w", err)
	}
	var top int
	if err := conn.QueryRowContext(ctx,
		`SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&top); err != nil {
		return fmt.Errorf("cannot read schema version: %w", err)
	}
	// A newer binary may have migrated this database; running older code on
	// it could write rows the newer schema does not expect.
	if top > len(migrations) {
		return fmt.Errorf("cannot use database at schema version %d: this binary knows up to %d; upgrade rlsched", top, len(migrations))
	}
	for i := top; i < len(migrations); i++ {
		version := i + 1
		for _, stmt := range migrations[i] {
			// An ADD COLUMN or ADD KEY that ran before a crash, short of
			// recording its version, is done.
			if _, err := conn.ExecContext(ctx, stmt); err != nil && !isErr(err, errDupFieldName) && !isErr(err, errDupKeyName) {
				return fmt.Errorf("cannot apply migration %d: %w", version, err)
			}
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
			version, time.Now().UnixNano()); err != nil {
			return fmt.Errorf("cannot record migration %d: %w", version, err)
		}
	}
	return nil
}
