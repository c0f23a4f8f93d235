package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/storetest"
)

func openTemp(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return openTemp(t, filepath.Join(t.TempDir(), "rlsched.db"))
	})
}

// appliedVersions lists schema_migrations.
func appliedVersions(t *testing.T, s *Store) []int {
	t.Helper()
	rows, err := s.r.QueryContext(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	return vs
}

// TestReopen: data survives a close, and opening again applies no migration
// twice (migration 1 has plain CREATE TABLEs, so a second run would fail).
func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "dir", "rlsched.db")
	s1, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	u := core.User{Username: "alice", PasswordHash: "h"}
	if err := s1.CreateUser(t.Context(), &u); err != nil {
		t.Fatal(err)
	}
	tk := core.Task{ID: "r1", UserID: u.ID, Command: []string{"true"}}
	if err := s1.CreateTask(t.Context(), &tk); err != nil {
		t.Fatal(err)
	}
	if err := s1.AppendMetrics(t.Context(), "r1", []core.MetricPoint{{Step: 1, Name: "x", Value: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		s := openTemp(t, path)
		if vs := appliedVersions(t, s); len(vs) != len(migrations) || vs[len(vs)-1] != len(migrations) {
			t.Fatalf("schema_migrations: got %v, want 1..%d once each", vs, len(migrations))
		}
		got, err := s.Task(t.Context(), "r1")
		if err != nil || got.User != "alice" || got.Command[0] != "true" {
			t.Fatalf("run after reopen: %+v, %v", got, err)
		}
		if m, err := s.Metrics(t.Context(), "r1", nil); err != nil || len(m["x"]) != 1 {
			t.Fatalf("metrics after reopen: %v, %v", m, err)
		}
		// Still the first user: a reopen must not make the next one admin.
		bob := core.User{Username: "bob", PasswordHash: "h"}
		if err := s.CreateUser(t.Context(), &bob); err != nil && !errors.Is(err, core.ErrConflict) {
			t.Fatal(err)
		} else if err == nil && bob.Role != core.RoleUser {
			t.Fatalf("bob after reopen: role %s, want USER", bob.Role)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNewerSchemaRefused: a file migrated by a newer binary is not touched.
func TestNewerSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rlsched.db")
	s := openTemp(t, path)
	if _, err := s.w.ExecContext(context.Background(),
		`INSERT INTO schema_migrations(version, applied_at) VALUES (?, 0)`, len(migrations)+1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s2, err := Open(path); err == nil {
		_ = s2.Close()
		t.Fatal("Open of a newer schema succeeded, want an error")
	}
}

func TestOpenBadPath(t *testing.T) {
	for _, p := range []string{"", ":memory:", filepath.Join(t.TempDir(), "a?b.db")} {
		if s, err := Open(p); err == nil {
			_ = s.Close()
			t.Fatalf("Open(%q) succeeded, want an error", p)
		}
	}
}

// TestReadPoolIsReadOnly: a write that slipped onto the read pool would
// bypass the single-writer discipline; query_only makes it fail loudly.
func TestReadPoolIsReadOnly(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "rlsched.db"))
	if _, err := s.r.ExecContext(t.Context(), `DELETE FROM users`); err == nil {
		t.Fatal("write on the read pool succeeded")
	}
}

// queuePlan is how SQLite runs QueuedTasks' window query, or q with args.
func queuePlan(t *testing.T, s *Store, q ...any) string {
	t.Helper()
	query, args := queueQueries.Plain, []any{10}
	if len(q) > 0 {
		query, args = q[0].(string), q[1:]
	}
	rows, err := s.r.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}

// TestQueueIndex: the queue is read through the partial index of QUEUED
// runs, also in a file made before it existed (migration 3), with no sort.
func TestQueueIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rlsched.db")
	s := openTemp(t, path)
	if p := queuePlan(t, s); !strings.Contains(p, "tasks_queued") || strings.Contains(p, "TEMP B-TREE") {
		t.Fatalf("plan %q, want the tasks_queued index without a sort", p)
	}
	// The fair window's groups are read off their index alone, and a
	// group's runs through it, without a sort.
	if p := queuePlan(t, s, queueQueries.Groups); !strings.Contains(p, "COVERING INDEX tasks_queued_groups") {
		t.Fatalf("groups plan %q, want the covering tasks_queued_groups index", p)
	}
	if p := queuePlan(t, s, queueQueries.Group, 1, "", 10, 0); !strings.Contains(p, "tasks_queued_groups") || strings.Contains(p, "TEMP B-TREE") {
		t.Fatalf("group plan %q, want tasks_queued_groups without a sort", p)
	}
	// Back to schema 2, with a queued run, then reopen.
	u := core.User{Username: "alice", PasswordHash: "h"}
	if err := s.CreateUser(t.Context(), &u); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTask(t.Context(), &core.Task{ID: "q1", UserID: u.ID, Command: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(t.Context(), `DROP INDEX tasks_queued;
		CREATE INDEX tasks_queue ON tasks(status, priority DESC, created_at, id);
		DELETE FROM schema_migrations WHERE version = 3`); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTemp(t, path)
	if vs := appliedVersions(t, s); len(vs) != len(migrations) {
		t.Fatalf("schema_migrations %v after upgrade", vs)
	}
	if p := queuePlan(t, s); !strings.Contains(p, "tasks_queued") {
		t.Fatalf("plan %q after upgrade, want tasks_queued", p)
	}
	q, err := s.QueuedTasks(t.Context(), 0)
	if err != nil || len(q) != 1 || q[0].ID != "q1" {
		t.Fatalf("queue after upgrade: %+v, %v", q, err)
	}
}

// TestTokenVersionMigration: a database from before migration 4 gets the
// token_version column, 0 for its existing users.
func TestTokenVersionMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rlsched.db")
	s := openTemp(t, path)
	u := core.User{Username: "alice", PasswordHash: "h"}
	if err := s.CreateUser(t.Context(), &u); err != nil {
		t.Fatal(err)
	}
	if _, err := s.BumpTokenVersion(t.Context(), u.ID); err != nil {
		t.Fatal(err)
	}
	// Back to schema 3.
	for _, q := range []string{`ALTER TABLE users DROP COLUMN token_version`, `DELETE FROM schema_migrations WHERE version = 4`} {
		if _, err := s.w.ExecContext(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTemp(t, path)
	got, err := s.UserByID(t.Context(), u.ID)
	if err != nil || got.TokenVersion != 0 || got.Username != "alice" {
		t.Fatalf("after the migration: %+v, %v", got, err)
	}
}

// TestCodeMigration: a database from before the code migration gets the code
// columns, empty for its runs, and the diff table.
func TestCodeMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rlsched.db")
	s := openTemp(t, path)
	u := core.User{Username: "alice", PasswordHash: "h"}
	if err := s.CreateUser(t.Context(), &u); err != nil {
		t.Fatal(err)
	}
	tk := core.Task{ID: "old", UserID: u.ID, Code: core.CodeInfo{GitCommit: "abc", GitDirty: true}}
	if err := s.CreateTask(t.Context(), &tk); err != nil {
		t.Fatal(err)
	}
	// Back to the schema before it.
	v := 0
	for i, m := range migrations {
		if strings.Contains(m, "code_diffs") {
			v = i + 1
		}
	}
	for _, q := range []string{`ALTER TABLE tasks DROP COLUMN git_remote`, `ALTER TABLE tasks DROP COLUMN diff_id`,
		`ALTER TABLE tasks DROP COLUMN diff_omitted`, `DROP TABLE code_diffs`, fmt.Sprintf(`DELETE FROM schema_migrations WHERE version = %d`, v)} {
		if _, err := s.w.ExecContext(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTemp(t, path)
	got, err := s.Task(t.Context(), "old")
	if err != nil || got.Code != (core.CodeInfo{GitCommit: "abc", GitDirty: true}) {
		t.Fatalf("run after the migration: %+v, %v", got.Code, err)
	}
	if _, err := s.PutCodeDiff(t.Context(), []byte("+x\n")); err != nil {
		t.Fatalf("PutCodeDiff after the migration: %v", err)
	}
}

func TestLargeBatch(t *testing.T) {
	storetest.LargeBatch(t, openTemp(t, filepath.Join(t.TempDir(), "rlsched.db")))
}

// BenchmarkUpdateTasks: ns/op is one run's state change in a batch.
func BenchmarkUpdateTasks(b *testing.B) {
	for _, size := range []int{1, 3, 16, 100, 512} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "rlsched.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			storetest.BenchUpdateTasks(b, s, size)
		})
	}
}

// TestUsernameFoldMigration (issue 25): a database from before usernames
// were unique regardless of case keeps every account, even two names that
// clash ("Boss" and "boss"); the older one holds the name's fold, so no
// third spelling can be registered.
func TestUsernameFoldMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rlsched.db")
	s := openTemp(t, path)
	n := 11 // the fold migration
	for _, q := range []string{`DROP INDEX users_fold`, `ALTER TABLE users DROP COLUMN username_fold`,
		`DELETE FROM schema_migrations WHERE version = ` + strconv.Itoa(n),
		`INSERT INTO users(username, role, password_hash, created_at) VALUES ('Boss', 'ADMIN', 'h', 1), ('boss', 'USER', 'h', 2)`} {
		if _, err := s.w.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTemp(t, path)
	for _, name := range []string{"Boss", "boss"} {
		if _, err := s.UserByName(t.Context(), name); err != nil {
			t.Fatalf("UserByName(%s) after the migration: %v", name, err)
		}
	}
	u := core.User{Username: "BOSS", PasswordHash: "h"}
	if err := s.CreateUser(t.Context(), &u); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("CreateUser(BOSS) beside Boss and boss: %v, want ErrConflict", err)
	}
}

// BenchmarkAppendMetrics: ns/op is one metric point stored.
func BenchmarkAppendMetrics(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "rlsched.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchAppendMetrics(b, s)
}
