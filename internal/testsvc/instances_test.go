package testsvc

import (
	"context"
	"database/sql"
	"net"
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
