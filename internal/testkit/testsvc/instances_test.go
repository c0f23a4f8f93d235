package testsvc

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
)

func TestPrivateRedis(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	if err := redisCmd(r.Addr(), "SET k v", "+OK"); err != nil {
		t.Fatal(err)
	}
	r.Flush()
	if err := redisCmd(r.Addr(), "EXISTS k", ":0"); err != nil {
		t.Fatalf("after Flush: %v", err)
	}
	if err := redisCmd(r.Addr(), "SET k v", "+OK"); err != nil {
		t.Fatal(err)
	}
	addr := r.Addr()
	r.Stop()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("stopped Redis still accepts connections")
	}
	r.Stop() // stopping twice is harmless
	r.Start()
	if r.Addr() != addr {
		t.Fatalf("restarted on %s, was %s", r.Addr(), addr)
	}
	if err := redisCmd(r.Addr(), "EXISTS k", ":0"); err != nil {
		t.Fatalf("a restarted Redis must come back empty: %v", err)
	}
	r.Kill()
	r.Start()
	if err := redisPing(r.Addr()); err != nil {
		t.Fatal(err)
	}
}

func TestPrivateMariaDB(t *testing.T) {
	t.Parallel()
	m := StartMariaDB(t)
	if !strings.HasSuffix(m.DSN(), "/"+MariaDBDatabase) {
		t.Fatalf("DSN %q does not name %s", m.DSN(), MariaDBDatabase)
	}
	db, err := sql.Open("mysql", m.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, q := range []string{
		"CREATE DATABASE other", // root may create databases (tests make their own)
		"CREATE TABLE t (v INT PRIMARY KEY) ENGINE=InnoDB",
		"INSERT INTO t VALUES (42)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	m.Stop()
	if err := db.PingContext(ctx); err == nil {
		t.Fatal("ping succeeded while MariaDB was stopped")
	}
	m.Start()
	var v int
	if err := db.QueryRowContext(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != 42 {
		t.Fatalf("after a restart: v=%d err=%v; want the committed row back", v, err)
	}
}

func TestMissingBinary(t *testing.T) {
	for _, c := range []struct {
		ci       string
		wantSkip bool
	}{{"", true}, {"true", false}} {
		t.Setenv("CI", c.ci)
		r := &recorder{TB: t}
		run(r, func(tb testing.TB) { findBinary(tb, "Frobnicator", []string{"no-such-binary-rlsched"}, t.TempDir()) })
		got := r.skipped
		if !c.wantSkip {
			got = r.failed
		}
		if !strings.Contains(got, "Frobnicator is not installed") || !strings.Contains(got, "no-such-binary-rlsched") {
			t.Errorf("CI=%q: skipped %q, failed %q; want a %s naming the binary", c.ci, r.skipped, r.failed,
				map[bool]string{true: "skip", false: "failure"}[c.wantSkip])
		}
	}
}

// TestInstancesKeepToTheirDirs: nothing a private server writes lands in
// the /tmp that every test package running at once shares (CI once failed
// on a MariaDB temporary table there): its temporary files, socket and pid
// file are in the instance's own dirs.
func TestInstancesKeepToTheirDirs(t *testing.T) {
	t.Parallel()
	m := StartMariaDB(t)
	db, err := sql.Open("mysql", m.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tmpdir, socket, pidFile string
	if err := db.QueryRowContext(t.Context(), "SELECT @@tmpdir, @@socket, @@pid_file").Scan(&tmpdir, &socket, &pidFile); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{tmpdir, socket, pidFile} {
		if !inDirs(p, m.dirs) {
			t.Errorf("MariaDB uses %s, outside its own dirs %v", p, m.dirs)
		}
	}
	// A query that needs an on-disk temporary table (a TEXT column and a
	// GROUP BY) must work with that tmpdir.
	if _, err := db.ExecContext(t.Context(), "CREATE TABLE big (k INT, v TEXT)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), "INSERT INTO big VALUES (1, REPEAT('x', 60000)), (2, 'y')"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM (SELECT v, COUNT(*) FROM big GROUP BY v) g").Scan(&n); err != nil || n != 2 {
		t.Fatalf("on-disk temporary table: n=%d err=%v", n, err)
	}
	openFilesInDirs(t, "mariadbd", m.s.cmd.Process.Pid, m.dirs)

	r := StartRedis(t)
	b, err := os.ReadFile(filepath.Join(r.dir, "redis.pid"))
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(r.s.cmd.Process.Pid) {
		t.Errorf("redis pid file in %s: %q, %v; want pid %d", r.dir, b, err, r.s.cmd.Process.Pid)
	}
	openFilesInDirs(t, "redis-server", r.s.cmd.Process.Pid, []string{r.dir})
}

// openFilesInDirs fails t when process pid holds a file in the shared temp
// dir that is outside dirs.
func openFilesInDirs(t *testing.T, name string, pid int, dirs []string) {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	shared := filepath.Clean(os.TempDir()) + string(filepath.Separator)
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		target = strings.TrimSuffix(target, " (deleted)")
		if strings.HasPrefix(target, shared) && !inDirs(target, dirs) {
			t.Errorf("%s holds %s, in the shared %s and outside its own dirs %v", name, target, shared, dirs)
		}
	}
}

func inDirs(p string, dirs []string) bool {
	for _, d := range dirs {
		if rel, err := filepath.Rel(d, p); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return true
		}
	}
	return false
}
