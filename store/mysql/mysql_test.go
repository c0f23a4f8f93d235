package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testsvc"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/storetest"
)

// newDatabase creates an empty database of its own for t on the test server
// and drops it when t ends, so test runs never share state and may run in
// parallel. It returns the DSN naming that database.
func newDatabase(t testing.TB) string {
	t.Helper()
	server := testsvc.RequireMySQL(t)
	cfg, err := driver.ParseDSN(server)
	if err != nil {
		t.Fatalf("bad test DSN %q: %v", server, err)
	}
	admin, err := sql.Open("mysql", server)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "rlsched_test_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("cannot create test database: %v", err)
	}
	t.Cleanup(func() {
		// t.Context is done by now.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("cannot drop test database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// openTemp opens a store on a new database; it is closed before the
// database is dropped.
func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	dsn := newDatabase(t)
	s, err := Open(dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, dsn
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, _ := openTemp(t)
		return s
	})
}

func appliedVersions(t *testing.T, s *Store) []int {
	t.Helper()
	rows, err := s.db.QueryContext(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
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

// TestReopen: data survives a close, and opening again applies no
// migration twice.
func TestReopen(t *testing.T) {
	s1, dsn := openTemp(t)
	u := core.User{Username: "alice", PasswordHash: "h"}
	if err := s1.CreateUser(t.Context(), &u); err != nil {
		t.Fatal(err)
	}
	tk := core.Task{ID: "r1", UserID: u.ID, Command: []string{"true"}}
	if err := s1.CreateTask(t.Context(), &tk); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		s, err := Open(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if vs := appliedVersions(t, s); len(vs) != len(migrations) || vs[len(vs)-1] != len(migrations) {
			t.Fatalf("schema_migrations: got %v, want 1..%d once each", vs, len(migrations))
		}
		if got, err := s.Task(t.Context(), "r1"); err != nil || got.User != "alice" {
			t.Fatalf("run after reopen: %+v, %v", got, err)
		}
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

// TestConcurrentOpen: masters starting together on an empty database
// migrate it once (the named lock), and all of them open.
func TestConcurrentOpen(t *testing.T) {
	dsn := newDatabase(t)
	const n = 6
	var wg sync.WaitGroup
	stores := make([]*Store, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = Open(dsn) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Open %d: %v", i, errs[i])
		}
		defer stores[i].Close()
	}
	if vs := appliedVersions(t, stores[0]); len(vs) != len(migrations) {
		t.Fatalf("schema_migrations: got %v, want 1..%d once each", vs, len(migrations))
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	s, dsn := openTemp(t)
	if _, err := s.db.ExecContext(t.Context(),
		`INSERT INTO schema_migrations (version, applied_at) VALUES (?, 0)`, len(migrations)+1); err != nil {
		t.Fatal(err)
	}
	if s2, err := Open(dsn); err == nil {
		_ = s2.Close()
		t.Fatal("Open of a newer schema succeeded, want an error")
	} else if !strings.Contains(err.Error(), "upgrade rlsched") {
		t.Fatalf("Open of a newer schema: %v, want advice to upgrade", err)
	}
}

func TestOpenErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	_ = l.Close()
	f := func(dsn, want string) {
		t.Helper()
		start := time.Now()
		s, err := Open(dsn)
		if err == nil {
			_ = s.Close()
			t.Fatalf("Open(%q) succeeded, want an error", dsn)
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("Open(%q): %v; want it to say %q", dsn, err, want)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Fatalf("Open(%q) took %v to fail", dsn, d)
		}
	}
	f("root@tcp("+dead+")/rlsched", "cannot reach mysql store "+dead)
	f("root@tcp("+dead+")/rlsched", "scripts/services.sh")
	f("root@tcp("+dead+")/", "names no database")
	f("not a dsn", "cannot open mysql store")
}

// TestFloatsExact: doubles come back bit for bit through the text protocol
// (interpolateParams), in metrics and in the final reward.
func TestFloatsExact(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	u := core.User{Username: "alice", PasswordHash: "h"}
	if err := s.CreateUser(ctx, &u); err != nil {
		t.Fatal(err)
	}
	tk := core.Task{ID: "r1", UserID: u.ID}
	if err := s.CreateTask(ctx, &tk); err != nil {
		t.Fatal(err)
	}
	rnd := mrand.New(mrand.NewPCG(1, 2))
	vals := []float64{0.1 + 0.2, 1e-9, -1e-9, math.SmallestNonzeroFloat64, math.MaxFloat64, -math.MaxFloat64,
		5e-324, 2.2250738585072014e-308, 1 / 3.0, math.Nextafter(1, 2), 123456789.12345679, 0, math.Copysign(0, -1)}
	for range 300 {
		vals = append(vals, math.Float64frombits(rnd.Uint64()&^(0x7ff<<52)|uint64(rnd.IntN(2046)+1)<<52))
	}
	pts := make([]core.MetricPoint, len(vals))
	for i, v := range vals {
		pts[i] = core.MetricPoint{Step: int64(i), Name: "x", Value: v}
	}
	if err := s.AppendMetrics(ctx, "r1", pts); err != nil {
		t.Fatal(err)
	}
	got, err := s.Metrics(ctx, "r1", nil)
	if err != nil || len(got["x"]) != len(vals) {
		t.Fatalf("Metrics: %d points, %v; want %d", len(got["x"]), err, len(vals))
	}
	for i, p := range got["x"] {
		if p[1] != vals[i] {
			t.Fatalf("point %d: got %v (%#x), want %v (%#x)", i, p[1], math.Float64bits(p[1]), vals[i], math.Float64bits(vals[i]))
		}
	}
	for _, v := range vals[:40] {
		if err := s.SetFinalReward(ctx, "r1", v); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Task(ctx, "r1"); err != nil || *got.FinalReward != v {
			t.Fatalf("final reward: got %v, %v; want %v", got.FinalReward, err, v)
		}
	}
}

// TestBinaryKeys: a _bin collation would pad, making "loss" and "loss " one
// series and one project; the VARBINARY columns keep them apart.
func TestBinaryKeys(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	u := core.User{Username: "alice", PasswordHash: "h"}
	if err := s.CreateUser(ctx, &u); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ id, project string }{{"r1", "p"}, {"r2", "p "}, {"r3", "P"}, {"r4", "ü"}} {
		tk := core.Task{ID: p.id, UserID: u.ID, Project: p.project}
		if err := s.CreateTask(ctx, &tk); err != nil {
			t.Fatal(err)
		}
	}
	for project, want := range map[string]string{"p": "r1", "p ": "r2", "P": "r3", "ü": "r4"} {
		ts, _, err := s.ListTasks(ctx, store.Filter{Project: project})
		if err != nil || len(ts) != 1 || ts[0].ID != want || ts[0].Project != project {
			t.Fatalf("ListTasks(project %q) = %v, %v; want only %s", project, ts, err, want)
		}
	}
	if err := s.AppendMetrics(ctx, "r1", []core.MetricPoint{
		{Step: 1, Name: "loss", Value: 1}, {Step: 1, Name: "loss ", Value: 2}, {Step: 1, Name: "Loss", Value: 3},
	}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Metrics(ctx, "r1", []string{"loss "})
	if err != nil || len(got) != 1 || got["loss "][0][1] != 2 {
		t.Fatalf("Metrics(loss ) = %v, %v", got, err)
	}
	if all, _ := s.Metrics(ctx, "r1", nil); len(all) != 3 {
		t.Fatalf("Metrics = %v, want three series", all)
	}
}

// queue creates n QUEUED runs r00.. of one user, in queue order.
func queue(t *testing.T, s *Store, n int) {
	t.Helper()
	u := core.User{Username: "alice", PasswordHash: "h"}
	if err := s.CreateUser(t.Context(), &u); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		tk := core.Task{ID: fmt.Sprintf("r%02d", i), UserID: u.ID, CreatedAt: base.Add(time.Duration(i) * time.Second)}
		if err := s.CreateTask(t.Context(), &tk); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTokenVersionMigration: a database from before migration 3 (and the
// later ones, which migrate applies in order after it) gets the
// token_version column, 0 for its existing users; and a master that added
// the column but died before recording the migration leaves a database the
// next one opens.
func TestTokenVersionMigration(t *testing.T) {
	s, dsn := openTemp(t)
	u := core.User{Username: "alice", PasswordHash: "h"}
	if err := s.CreateUser(t.Context(), &u); err != nil {
		t.Fatal(err)
	}
	if _, err := s.BumpTokenVersion(t.Context(), u.ID); err != nil {
		t.Fatal(err)
	}
	// Migrations after 3 are undone with it: migrate starts after the
	// highest version recorded.
	execAll(t, s, `ALTER TABLE users DROP COLUMN token_version`, `DELETE FROM schema_migrations WHERE version >= 3`)
	s2 := reopen(t, s, dsn)
	if got, err := s2.UserByID(t.Context(), u.ID); err != nil || got.TokenVersion != 0 {
		t.Fatalf("after the migration: %+v, %v", got, err)
	}
	execAll(t, s2, `DELETE FROM schema_migrations WHERE version >= 3`) // the columns stay
	s3, err := Open(dsn)
	if err != nil {
		t.Fatalf("reopen after a half-recorded migration: %v", err)
	}
	_ = s3.Close()
}

// codeMigration is the version of the migration that adds code diffs.
func codeMigration(t *testing.T) int {
	t.Helper()
	for i, m := range migrations {
		if strings.Contains(strings.Join(m, "\n"), "code_diffs") {
			return i + 1
		}
	}
	t.Fatal("no migration creates code_diffs")
	return 0
}

// TestCodeMigration: a database from before the code migration gets the code
// columns (empty for its runs) and the diff table; a master that died
// before recording the migration leaves a database the next one opens.
func TestCodeMigration(t *testing.T) {
	s, dsn := openTemp(t)
	queue(t, s, 1)
	v := codeMigration(t)
	execAll(t, s, `ALTER TABLE tasks DROP COLUMN git_remote, DROP COLUMN diff_id, DROP COLUMN diff_omitted`,
		`DROP TABLE code_diffs`, fmt.Sprintf(`DELETE FROM schema_migrations WHERE version >= %d`, v))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q, err := s2.QueuedTasks(t.Context(), 0)
	if err != nil || len(q) != 1 || q[0].Code != (core.CodeInfo{}) {
		t.Fatalf("runs after the migration: %+v, %v", q, err)
	}
	if _, err := s2.PutCodeDiff(t.Context(), []byte("+x\n")); err != nil {
		t.Fatalf("PutCodeDiff after the migration: %v", err)
	}
	execAll(t, s2, fmt.Sprintf(`DELETE FROM schema_migrations WHERE version >= %d`, v)) // the columns stay
	_ = s2.Close()
	s3, err := Open(dsn)
	if err != nil {
		t.Fatalf("reopen after a half-recorded migration: %v", err)
	}
	_ = s3.Close()
}

// TestUsernameFoldMigration: as sqlite's: clashing names from before the
// migration keep their accounts, the older holds the fold.
func TestUsernameFoldMigration(t *testing.T) {
	s, dsn := openTemp(t)
	execAll(t, s, `ALTER TABLE users DROP KEY users_fold, DROP COLUMN username_fold`,
		`DELETE FROM schema_migrations WHERE version >= 10`, // from the fold migration on
		`INSERT INTO users (username, role, password_hash, created_at) VALUES ('Boss', 'ADMIN', 'h', 1), ('boss', 'USER', 'h', 2)`)
	s2 := reopen(t, s, dsn)
	for _, name := range []string{"Boss", "boss"} {
		if _, err := s2.UserByName(t.Context(), name); err != nil {
			t.Fatalf("UserByName(%s) after the migration: %v", name, err)
		}
	}
	u := core.User{Username: "BOSS", PasswordHash: "h"}
	if err := s2.CreateUser(t.Context(), &u); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("CreateUser(BOSS) beside Boss and boss: %v, want ErrConflict", err)
	}
}

// execAll runs each statement on s, failing t at the first error.
func execAll(t *testing.T, s *Store, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := s.db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// reopen closes s and opens its database again, as a restarted master
// does (migrating it), closed at the end of the test.
func reopen(t *testing.T, s *Store, dsn string) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	return s2
}
