package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// migrations are applied in order; migration i has version i+1. Never edit or
// reorder an entry that has shipped: append a new one instead, since an
// existing database records only the versions it applied.
//
// Times are unix nanoseconds (INTEGER) so ordering by creation is exact;
// command, env, tags and gpu_indices are JSON text, never NULL ("[]"/"{}").
var migrations = []string{
	// 1: users, runs and metrics.
	`CREATE TABLE users (
		id            INTEGER PRIMARY KEY AUTOINCREMENT,
		username      TEXT    NOT NULL UNIQUE,
		role          TEXT    NOT NULL,
		password_hash TEXT    NOT NULL,
		created_at    INTEGER NOT NULL
	);
	CREATE TABLE tasks (
		id              TEXT    PRIMARY KEY,
		name            TEXT    NOT NULL,
		project         TEXT    NOT NULL,
		user_id         INTEGER NOT NULL REFERENCES users(id),
		status          TEXT    NOT NULL,
		attempt         INTEGER NOT NULL,
		max_retries     INTEGER NOT NULL,
		command         TEXT    NOT NULL,
		params          TEXT,
		gpus            INTEGER NOT NULL,
		priority        INTEGER NOT NULL,
		env             TEXT    NOT NULL,
		tags            TEXT    NOT NULL,
		workdir         TEXT    NOT NULL,
		worker          TEXT    NOT NULL,
		gpu_indices     TEXT    NOT NULL,
		trace_id        TEXT    NOT NULL,
		exit_code       INTEGER,
		error           TEXT    NOT NULL,
		final_reward    REAL,
		git_commit      TEXT    NOT NULL,
		git_dirty       INTEGER NOT NULL,
		timeout_seconds INTEGER NOT NULL,
		created_at      INTEGER NOT NULL,
		started_at      INTEGER,
		finished_at     INTEGER,
		updated_at      INTEGER NOT NULL,
		fence           INTEGER NOT NULL
	);
	-- QueuedTasks: status = 'QUEUED' ORDER BY priority DESC, created_at, id.
	CREATE INDEX tasks_queue ON tasks(status, priority DESC, created_at, id);
	-- ListTasks newest first, alone or filtered by status, owner or project.
	CREATE INDEX tasks_newest ON tasks(created_at DESC, id DESC);
	CREATE INDEX tasks_status_newest ON tasks(status, created_at DESC, id DESC);
	CREATE INDEX tasks_user_newest ON tasks(user_id, created_at DESC, id DESC);
	CREATE INDEX tasks_project_newest ON tasks(project, created_at DESC, id DESC);
	-- One value per (run, series, step): a resent metric replaces itself, and
	-- the key is the index that reads a series in step order.
	CREATE TABLE metrics (
		task_id TEXT    NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
		name    TEXT    NOT NULL,
		step    INTEGER NOT NULL,
		value   REAL    NOT NULL,
		PRIMARY KEY (task_id, name, step)
	) WITHOUT ROWID;`,
	// 2: cancel requests, apart from the run row so that recording one is
	// not a state change of the run (sqlutil/cancel.go).
	`CREATE TABLE cancel_requests (
		task_id      TEXT    PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
		requested_at INTEGER NOT NULL
	) WITHOUT ROWID;`,
	// 3: the queue index holds QUEUED runs only. Keyed on status, it took a
	// delete and an insert at each of a run's three status changes; now only
	// leaving the queue touches it (profiles of the dispatch benchmark had
	// the fenced UPDATEs at a third of the master's CPU). QueuedTasks names
	// the status literally so the planner can use it.
	`DROP INDEX tasks_queue;
	CREATE INDEX tasks_queued ON tasks(priority DESC, created_at, id) WHERE status = 'QUEUED';`,
	// 4: a user's token version, stamped into tokens and raised to revoke
	// them (logout, a change of role).
	`ALTER TABLE users ADD COLUMN token_version INTEGER NOT NULL DEFAULT 0;`,
	// 5: a run's code beyond its commit: the remote, the stored diff (by
	// content: a rerun or a sweep's members share one copy) or why it was
	// not stored (sqlutil/codediff.go).
	`ALTER TABLE tasks ADD COLUMN git_remote TEXT NOT NULL DEFAULT '';
	ALTER TABLE tasks ADD COLUMN diff_id TEXT NOT NULL DEFAULT '';
	ALTER TABLE tasks ADD COLUMN diff_omitted TEXT NOT NULL DEFAULT '';
	CREATE TABLE code_diffs (
		id         TEXT    PRIMARY KEY,
		diff       BLOB    NOT NULL,
		created_at INTEGER NOT NULL
	);`,
	// 6: user administration and notifications (issue 18). A deleted user
	// keeps its row (its runs' owner) under core.DeletedUsername.
	`ALTER TABLE users ADD COLUMN disabled INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE users ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE users ADD COLUMN last_login_at INTEGER;
	ALTER TABLE users ADD COLUMN notify_webhook TEXT NOT NULL DEFAULT '';
	ALTER TABLE users ADD COLUMN notify_on TEXT NOT NULL DEFAULT '';`,
	// 7: sweeps (API.md "Sweeps and seed groups") and finding runs again.
	// A run's sweep and the run it reruns are fixed at creation ('' for
	// none). sweep_members points each member at its latest run (a retry
	// moves it). metric_packs holds the series of ended runs packed, one
	// row per run and name, so a sweep's curves read one row per member
	// instead of one per point (sqlutil/packs.go); a write of points drops the
	// run's packs.
	`ALTER TABLE tasks ADD COLUMN sweep_id TEXT NOT NULL DEFAULT '';
	ALTER TABLE tasks ADD COLUMN rerun_of TEXT NOT NULL DEFAULT '';
	CREATE INDEX tasks_sweep_newest ON tasks(sweep_id, created_at DESC, id DESC);
	CREATE INDEX tasks_rerun_of ON tasks(rerun_of, created_at DESC, id DESC) WHERE rerun_of <> '';
	-- SweepLimits: a sweep's active members. Partial, so that only sweep
	-- members' status changes touch it; the query names the condition.
	CREATE INDEX tasks_sweep_active ON tasks(sweep_id)
		WHERE sweep_id <> '' AND status IN ('DISPATCHED', 'RUNNING');
	CREATE TABLE sweeps (
		id           TEXT    PRIMARY KEY,
		name         TEXT    NOT NULL,
		project      TEXT    NOT NULL,
		user_id      INTEGER NOT NULL REFERENCES users(id),
		max_parallel INTEGER NOT NULL,
		members      INTEGER NOT NULL,
		spec         TEXT    NOT NULL,
		created_at   INTEGER NOT NULL
	);
	CREATE INDEX sweeps_newest ON sweeps(created_at DESC, id DESC);
	CREATE INDEX sweeps_user_newest ON sweeps(user_id, created_at DESC, id DESC);
	CREATE TABLE sweep_members (
		sweep_id TEXT    NOT NULL REFERENCES sweeps(id),
		member   INTEGER NOT NULL,
		task_id  TEXT    NOT NULL,
		PRIMARY KEY (sweep_id, member)
	) WITHOUT ROWID;
	CREATE TABLE metric_packs (
		task_id TEXT    NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
		name    TEXT    NOT NULL,
		points  INTEGER NOT NULL,
		data    BLOB    NOT NULL,
		PRIMARY KEY (task_id, name)
	) WITHOUT ROWID;
	-- A sweep's version reads its packs' points from here, not from the
	-- rows that hold the series.
	CREATE INDEX metric_packs_points ON metric_packs(task_id, name, points);`,
	// 8: run outputs (issue 14): the artifact index, the run a run resumes
	// from, and a run's warnings (a JSON array that AddWarning appends to,
	// which no UpdateTask writes).
	`ALTER TABLE tasks ADD COLUMN resume_from TEXT NOT NULL DEFAULT '';
	ALTER TABLE tasks ADD COLUMN warnings TEXT NOT NULL DEFAULT '[]';
	-- One row per (run, path, attempt): the newest version an attempt
	-- uploaded. The key serves a run's listing in path order and the
	-- newest attempt of each path.
	CREATE TABLE artifacts (
		task_id     TEXT    NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
		path        TEXT    NOT NULL,
		attempt     INTEGER NOT NULL,
		size        INTEGER NOT NULL,
		sha256      TEXT    NOT NULL,
		modified_at INTEGER NOT NULL,
		stored_at   INTEGER NOT NULL,
		PRIMARY KEY (task_id, path, attempt)
	) WITHOUT ROWID;`,
	// 9: the scheduling policy (issue 15): a user's fair-share usage, kept
	// as GPU-seconds at an instant (as_of, decayed from there: AddUsage),
	// and their quota (NULL: no cap).
	`CREATE TABLE user_usage (
		user_id     INTEGER PRIMARY KEY REFERENCES users(id),
		gpu_seconds REAL    NOT NULL,
		as_of       INTEGER NOT NULL
	);
	CREATE TABLE user_quotas (
		user_id INTEGER PRIMARY KEY REFERENCES users(id),
		gpus    INTEGER,
		runs    INTEGER
	);`,
	// 10: preemption (issue 15): whether a run may be preempted, its grace,
	// how often it was and when last.
	`ALTER TABLE tasks ADD COLUMN preemptible INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE tasks ADD COLUMN preempt_grace INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE tasks ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE tasks ADD COLUMN preempted_at INTEGER;`,
	// 11: usernames unique regardless of case (issue 25: "Boss" beside
	// "boss"). Of names that already clash, the oldest keeps the fold and
	// the others keep working with none (NULL is never a duplicate).
	`ALTER TABLE users ADD COLUMN username_fold TEXT;
	UPDATE users SET username_fold = lower(username)
		WHERE deleted = 0 AND id IN (SELECT MIN(id) FROM users WHERE deleted = 0 GROUP BY lower(username));
	CREATE UNIQUE INDEX users_fold ON users(username_fold);`,
	// 12: wave 3's run fields: resources (issue 26), private and kind
	// (issues 25, 34), the end's reason, usage and stderr tail, and the
	// record's note and baseline flag (issue 30).
	`ALTER TABLE tasks ADD COLUMN cpus REAL NOT NULL DEFAULT 0;
	ALTER TABLE tasks ADD COLUMN memory_mb INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE tasks ADD COLUMN private INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE tasks ADD COLUMN kind TEXT NOT NULL DEFAULT 'batch';
	ALTER TABLE tasks ADD COLUMN reason TEXT NOT NULL DEFAULT '';
	ALTER TABLE tasks ADD COLUMN usage_json TEXT;
	ALTER TABLE tasks ADD COLUMN error_tail TEXT NOT NULL DEFAULT '';
	ALTER TABLE tasks ADD COLUMN note TEXT NOT NULL DEFAULT '';
	ALTER TABLE tasks ADD COLUMN baseline INTEGER NOT NULL DEFAULT 0;`,
	// 13: the queue's runs by owner and sweep, for the fair window
	// (sqlutil.FairQueue): its groups are read off the index alone.
	`CREATE INDEX tasks_queued_groups ON tasks(user_id, sweep_id, priority DESC, created_at, id) WHERE status = 'QUEUED';`,
	// 14: a run's history, its state changes in order (issue 32), a JSON
	// array that every update stores whole (core.Task.History).
	`ALTER TABLE tasks ADD COLUMN history TEXT;`,
	// 15 (issue 28): where a run may go: its fraction of a GPU (a column:
	// Usage sums it) and its GPU memory, types and label constraints (a
	// JSON object, NULL for none).
	`ALTER TABLE tasks ADD COLUMN gpu_fraction REAL NOT NULL DEFAULT 0;
	ALTER TABLE tasks ADD COLUMN placement_json TEXT;`,
	// 16 (issue 29): dependencies and pipelines. A run that waits on its
	// parents (waiting = 1) is left out of the queue's indexes, so any
	// number of them costs the planner's window nothing; tasks_waiting
	// finds them for the release pass. deps is the run's after and
	// inputsFrom (JSON); task_deps its edges, indexed both ways; a
	// pipeline's steps name the run of each step (its latest, after a
	// retry).
	`ALTER TABLE tasks ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE tasks ADD COLUMN deps TEXT;
	DROP INDEX tasks_queued;
	CREATE INDEX tasks_queued ON tasks(priority DESC, created_at, id) WHERE status = 'QUEUED' AND waiting = 0;
	DROP INDEX tasks_queued_groups;
	CREATE INDEX tasks_queued_groups ON tasks(user_id, sweep_id, priority DESC, created_at, id) WHERE status = 'QUEUED' AND waiting = 0;
	CREATE INDEX tasks_waiting ON tasks(id) WHERE status = 'QUEUED' AND waiting = 1;
	CREATE TABLE task_deps (
		child_id  TEXT NOT NULL,
		parent_id TEXT NOT NULL,
		cond      TEXT NOT NULL,
		PRIMARY KEY (child_id, parent_id)
	) WITHOUT ROWID;
	CREATE INDEX task_deps_parent ON task_deps(parent_id, child_id);
	CREATE TABLE pipelines (
		id         TEXT    PRIMARY KEY,
		name       TEXT    NOT NULL,
		user_id    INTEGER NOT NULL REFERENCES users(id),
		created_at INTEGER NOT NULL
	);
	CREATE TABLE pipeline_steps (
		pipeline_id TEXT    NOT NULL REFERENCES pipelines(id) ON DELETE CASCADE,
		idx         INTEGER NOT NULL,
		name        TEXT    NOT NULL,
		run_id      TEXT    NOT NULL,
		PRIMARY KEY (pipeline_id, idx)
	) WITHOUT ROWID;`,
	// 17 (issue 27): a run's Python environment, core.PythonEnv's JSON
	// (NULL: none), fixed at submission.
	`ALTER TABLE tasks ADD COLUMN python_env TEXT;`,
	// 18 (issue 27): a run's code snapshot, its tree hash and the
	// directory of the tree it starts in (core.CodeInfo.Tree, Subdir).
	`ALTER TABLE tasks ADD COLUMN code_tree TEXT NOT NULL DEFAULT '';
	ALTER TABLE tasks ADD COLUMN code_subdir TEXT NOT NULL DEFAULT '';`,
	// 19 (issue 35): an early-stopping sweep's rung decisions, continues
	// and stops, each kept once by (run, rung) so that a replay never
	// turns a continue into a stop (store.SweepDecision).
	`CREATE TABLE sweep_decisions (
		sweep_id   TEXT    NOT NULL,
		task_id    TEXT    NOT NULL,
		rung       INTEGER NOT NULL,
		step       INTEGER NOT NULL,
		value      REAL    NOT NULL,
		cut        REAL    NOT NULL,
		peers      INTEGER NOT NULL,
		stop       INTEGER NOT NULL,
		decided_at INTEGER NOT NULL,
		PRIMARY KEY (task_id, rung)
	) WITHOUT ROWID;
	CREATE INDEX sweep_decisions_sweep ON sweep_decisions(sweep_id, rung);`,
	// 20 (issue 32): a run's pipeline, found by the run (PipelineOfRun:
	// a pipeline notifies once, when its last step ended).
	`CREATE INDEX pipeline_steps_run ON pipeline_steps(run_id);`,
	// 21 (issue 30): when a point was logged, Unix ms as the master read its
	// line (core.MetricPoint.Time), for charts on a time axis; NULL for
	// points stored before it, or without a time.
	`ALTER TABLE metrics ADD COLUMN t INTEGER;`,
}

// migrate applies every migration the database has not recorded, each in
// its own IMMEDIATE transaction, so two processes opening one file at once
// serialise and neither applies a migration twice.
func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("cannot create schema_migrations: %w", err)
	}
	// A newer binary may have migrated this file; running older code on it
	// could write rows the newer schema does not expect.
	var top int
	if err := s.w.QueryRowContext(ctx,
		`SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&top); err != nil {
		return fmt.Errorf("cannot read schema version: %w", err)
	}
	if top > len(migrations) {
		return fmt.Errorf("cannot use database at schema version %d: this binary knows up to %d; upgrade rlsched", top, len(migrations))
	}
	for i, m := range migrations {
		version := i + 1
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx,
				`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx,
				`INSERT INTO schema_migrations(version, applied_at) VALUES (?, ?)`,
				version, time.Now().UnixNano())
			return err
		})
		if err != nil {
			return fmt.Errorf("cannot apply migration %d: %w", version, err)
		}
	}
	return nil
}
