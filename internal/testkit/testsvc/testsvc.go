// Package testsvc finds the real services that some tests need (MariaDB or
// MySQL, Redis). A test calls RequireMySQL or RequireRedis first: when the
// service answers, it gets its address; when it does not, the test is
// skipped on a developer's machine and fails under CI=true, so CI can never
// go green by skipping. scripts/services.sh starts both services locally.
//
// Require* only dial; they never create, change or delete anything on the
// shared services, and the package imports no driver. Tests that stop,
// restart or flush a service start a private one: StartRedis, StartMariaDB
// (instances.go).
package testsvc

import (
	"net"
	"os"
	"regexp"
	"testing"
	"time"
)

// Environment variables that point the tests elsewhere than the defaults.
const (
	// MySQLEnv is a go-sql-driver DSN without a database, e.g.
	// "root@tcp(127.0.0.1:3306)/". Its user must be allowed to create and
	// drop databases.
	MySQLEnv = "RLSCHED_TEST_MYSQL_DSN"
	// RedisEnv is a Redis address, host:port.
	RedisEnv = "RLSCHED_TEST_REDIS_ADDR"

	defaultMySQL = "root@tcp(127.0.0.1:3306)/"
	defaultRedis = "127.0.0.1:6379"
	dialTimeout  = 2 * time.Second
)

// tcpAddr extracts host:port from a DSN's tcp(...) part.
var tcpAddr = regexp.MustCompile(`@tcp\(([^)]*)\)`)

// RequireMySQL returns the DSN (no database) of a MySQL or MariaDB server
// that accepts TCP connections, or skips t (fails it under CI=true).
func RequireMySQL(t testing.TB) string {
	t.Helper()
	dsn := env(MySQLEnv, defaultMySQL)
	m := tcpAddr.FindStringSubmatch(dsn)
	if m == nil {
		t.Fatalf("testsvc: %s=%q has no @tcp(host:port) part", MySQLEnv, dsn)
	}
	require(t, "MariaDB/MySQL", m[1], MySQLEnv)
	return dsn
}

// RequireRedis returns the address of a Redis server that accepts TCP
// connections, or skips t (fails it under CI=true).
func RequireRedis(t testing.TB) string {
	t.Helper()
	addr := env(RedisEnv, defaultRedis)
	require(t, "Redis", addr, RedisEnv)
	return addr
}

// require dials addr; when nothing answers it skips t, or fails it in CI.
func require(t testing.TB, name, addr, envVar string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err == nil {
		_ = c.Close()
		return
	}
	msg := name + " is not reachable at " + addr + " (" + err.Error() + "); run scripts/services.sh to start it, " +
		"or set " + envVar + " to point the tests at another server"
	if os.Getenv("CI") == "true" {
		t.Fatal("testsvc: CI=true needs the real service: " + msg)
	}
	t.Skip("testsvc: " + msg)
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
