package sqlite

import (
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

// The SQL this backend spells its own way, for sqlutil to run.

// queryDialect spells sqlutil's conditions with SQLite's JSON functions; the
// name test lowercases ASCII letters only (SQLite's lower()).
var queryDialect = sqlutil.Dialect{
	HasTag:       `EXISTS (SELECT 1 FROM json_each(t.tags) WHERE json_each.value = ?)`,
	NameContains: `instr(lower(t.name), lower(?)) > 0`,
	NoteContains: `instr(lower(t.note), lower(?)) > 0`,
	Param: func(f store.ParamFilter) (string, []any) {
		p := sqlutil.ParamPath(f.Key)
		switch f.Kind {
		case store.ParamNumber:
			return `(json_type(t.params, ?) IN ('integer', 'real') AND json_extract(t.params, ?) = ?)`, []any{p, p, f.Num}
		case store.ParamString:
			return `(json_type(t.params, ?) = 'text' AND json_extract(t.params, ?) = ?)`, []any{p, p, f.Str}
		case store.ParamBool:
			v := "false"
			if f.Bool {
				v = "true"
			}
			return `json_type(t.params, ?) = ?`, []any{p, v}
		}
		return `json_type(t.params, ?) = 'null'`, []any{p}
	},
}

// dialects are the statements of sqlutil.Shared in SQLite's SQL.
var dialects = sqlutil.Dialects{
	Query: queryDialect,
	Usage: sqlutil.UsageDialect{
		Ensure: `INSERT OR IGNORE INTO user_usage(user_id, gpu_seconds, as_of) VALUES (?, 0, 0)`,
		// The writer's transaction holds the database: no row lock needed.
		Lock: `SELECT gpu_seconds, as_of FROM user_usage WHERE user_id = ?`,
	},
	Quota: sqlutil.QuotaDialect{Upsert: `INSERT INTO user_quotas(user_id, gpus, runs) VALUES (?, ?, ?)
		ON CONFLICT(user_id) DO UPDATE SET gpus = excluded.gpus, runs = excluded.runs`},
	Artifact: sqlutil.ArtifactDialect{
		Upsert: `INSERT INTO artifacts (task_id, path, attempt, size, sha256, modified_at, stored_at)
			SELECT ?, ?, ?, ?, ?, ?, ? FROM tasks WHERE id = ?
			ON CONFLICT (task_id, path, attempt) DO UPDATE SET size = excluded.size, sha256 = excluded.sha256,
				modified_at = excluded.modified_at, stored_at = excluded.stored_at`,
		// json_insert at '$[#]' appends.
		AddWarning: `UPDATE tasks SET warnings = json_insert(warnings, '$[#]', json(?))
			WHERE id = ? AND json_array_length(warnings) < ?`,
	},
	// InsertPack is prepared once per transaction of packs: SQLite would
	// parse it again for every pack.
	// The queue's partial indexes hold every QUEUED run, waiting or not,
	// and the first is covering: without INDEXED BY, SQLite counted a
	// user's queued runs through tasks_user_newest, reading every row the
	// user ever submitted (issue 33: in rest-submit, one COUNT a second
	// that read the whole table through the read pool's mmap, 25-40 MiB
	// of the master's peak RSS; 7-11 ms a count at 20,000 runs, 1.6 ms now).
	QueuedCount: `SELECT (SELECT COUNT(*) FROM tasks INDEXED BY tasks_queued_groups
			WHERE status = 'QUEUED' AND waiting = 0 AND user_id = ?)
		+ (SELECT COUNT(*) FROM tasks INDEXED BY tasks_waiting
			WHERE status = 'QUEUED' AND waiting = 1 AND user_id = ?)`,
	// Without it SQLite took every QUEUED run through tasks_status_newest
	// and read each row for waiting: the depctl loop's DecidableWaiting
	// read the whole table (44 ms at 20,000 queued runs, none waiting;
	// 5 µs through the partial index), another mmap spike of rest-submit's
	// peak RSS (issue 33).
	WaitingIndex: "INDEXED BY tasks_waiting",
	Sweep: sqlutil.SweepDialect{
		PacksIndex: "INDEXED BY metric_packs_points",
		InsertPack: `INSERT INTO metric_packs (task_id, name, points, data)
			SELECT ?, ?, ?, ? WHERE (SELECT COUNT(*) FROM metrics WHERE task_id = ? AND name = ?) = ?
			ON CONFLICT (task_id, name) DO NOTHING`,
		PreparePack: true,
	},
	// SQLite has one writer, so the transaction alone serialises changes
	// of admins: nothing to lock.
	UserLock: "",
	PutCodeDiff: `INSERT INTO code_diffs (id, diff, created_at) VALUES (?, ?, ?)
		ON CONFLICT (id) DO NOTHING`,
	KeepDecision: `INSERT INTO sweep_decisions (sweep_id, task_id, rung, step, value, cut, peers, stop, decided_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (task_id, rung) DO NOTHING`,
	RequestCancel: `INSERT INTO cancel_requests(task_id, requested_at)
		SELECT id, ? FROM tasks WHERE id = ? ON CONFLICT(task_id) DO NOTHING`,
}
