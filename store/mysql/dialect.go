package mysql

import (
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

// The SQL this backend spells its own way, for sqlutil to run.

// jsonType is the JSON type of param ? of t.params, in MySQL's and
// MariaDB's names (MariaDB calls 1e-3 an INTEGER: any number type will do).
const jsonType = `JSON_TYPE(JSON_EXTRACT(t.params, ?))`

// queryDialect spells sqlutil's conditions with MySQL's JSON functions. Strings
// compare as bytes, as everywhere in this schema; the name test lowercases
// with the server's Unicode rules.
var queryDialect = sqlutil.Dialect{
	HasTag:       `JSON_CONTAINS(t.tags, JSON_QUOTE(?))`,
	NameContains: `LOCATE(LOWER(?), LOWER(t.name)) > 0`,
	NoteContains: `LOCATE(LOWER(?), LOWER(t.note)) > 0`,
	Param: func(f store.ParamFilter) (string, []any) {
		p := sqlutil.ParamPath(f.Key)
		switch f.Kind {
		case store.ParamNumber:
			return `(` + jsonType + ` IN ('INTEGER', 'UNSIGNED INTEGER', 'DOUBLE', 'DECIMAL') AND JSON_EXTRACT(t.params, ?) = ?)`,
				[]any{p, p, f.Num}
		case store.ParamString:
			return `(` + jsonType + ` = 'STRING' AND CAST(JSON_UNQUOTE(JSON_EXTRACT(t.params, ?)) AS BINARY) = CAST(? AS BINARY))`,
				[]any{p, p, f.Str}
		case store.ParamBool:
			v := "false"
			if f.Bool {
				v = "true"
			}
			return `(` + jsonType + ` = 'BOOLEAN' AND JSON_UNQUOTE(JSON_EXTRACT(t.params, ?)) = ?)`, []any{p, p, v}
		}
		return jsonType + ` = 'NULL'`, []any{p}
	},
}

// dialects are the statements of sqlutil.Shared in MySQL's and MariaDB's
// SQL.
var dialects = sqlutil.Dialects{
	Query: queryDialect,
	// The row is made first so that FOR UPDATE locks a row, not a gap:
	// two masters' gap locks on a missing row would deadlock their inserts.
	Usage: sqlutil.UsageDialect{
		Ensure: `INSERT IGNORE INTO user_usage(user_id, gpu_seconds, as_of) VALUES (?, 0, 0)`,
		Lock:   `SELECT gpu_seconds, as_of FROM user_usage WHERE user_id = ? FOR UPDATE`,
	},
	Quota: sqlutil.QuotaDialect{Upsert: `INSERT INTO user_quotas(user_id, gpus, runs) VALUES (?, ?, ?)
		ON DUPLICATE KEY UPDATE gpus = VALUES(gpus), runs = VALUES(runs)`},
	Artifact: sqlutil.ArtifactDialect{
		// The INSERT ... SELECT reads the run under a shared lock, so a run
		// deleted at the same moment cannot leave a dangling row. VALUES(col)
		// rather than MySQL 8's row alias: MariaDB knows only the former.
		Upsert: `INSERT INTO artifacts (task_id, path, attempt, size, sha256, modified_at, stored_at)
			SELECT ?, ?, ?, ?, ?, ?, ? FROM tasks WHERE id = ?
			ON DUPLICATE KEY UPDATE size = VALUES(size), sha256 = VALUES(sha256),
				modified_at = VALUES(modified_at), stored_at = VALUES(stored_at)`,
		// JSON_ARRAY_APPEND; JSON_COMPACT hands the element over as JSON
		// (MariaDB has no CAST AS JSON), not as a string to quote.
		AddWarning: `UPDATE tasks SET warnings = JSON_ARRAY_APPEND(COALESCE(warnings, '[]'), '$', JSON_COMPACT(?))
			WHERE id = ? AND JSON_LENGTH(COALESCE(warnings, '[]')) < ?`,
	},
	// Parameters are interpolated client-side (Open): there is no
	// server-side statement to prepare, so InsertPack is sent as it is.
	Sweep: sqlutil.SweepDialect{
		PacksIndex: "FORCE INDEX (metric_packs_points)",
		InsertPack: `INSERT IGNORE INTO metric_packs (task_id, name, points, data)
			SELECT ?, ?, ?, ? FROM DUAL WHERE (SELECT COUNT(*) FROM metrics WHERE task_id = ? AND name = ?) = ?`,
	},
	// The rows a change of users reads are locked: of two changes of two
	// admins at once, the second waits for the first and counts what it
	// left.
	UserLock: " FOR UPDATE",
	// The same bytes are the same row, also when two masters race.
	PutCodeDiff: `INSERT INTO code_diffs (id, diff, created_at) VALUES (?, ?, ?)
		ON DUPLICATE KEY UPDATE id = id`,
	// The INSERT ... SELECT reads the run under a shared lock, so a run
	// deleted at the same moment cannot leave a dangling request.
	KeepDecision: `INSERT IGNORE INTO sweep_decisions (sweep_id, task_id, rung, step, value, cut, peers, stop, decided_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	RequestCancel: `INSERT IGNORE INTO cancel_requests (task_id, requested_at)
		SELECT id, ? FROM tasks WHERE id = ?`,
}
