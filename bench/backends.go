package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	driver "github.com/go-sql-driver/mysql"
	"github.com/redis/rueidis"

	"github.com/rlsched/rlsched/store/mysql"
)

// benchMySQLServer is the MariaDB the dispatch rows use (root, no password,
// as the development services run it); each run gets a database of its own.
const benchMySQLServer = "root@tcp(127.0.0.1:3306)/"

// dispatchBackend is which store and leases a master under test uses.
// The zero value is the embedded pair: SQLite and in-memory leases.
type dispatchBackend struct {
	tmpfs bool // SQLite on /dev/shm
	redis bool // REDIS_ADDR: leases in the real Redis under a fresh REDIS_PREFIX
	mysql bool // MYSQL_DSN: the store in a fresh MariaDB database
	dsn   string
}

func (b dispatchBackend) describe() string {
	switch {
	case b.redis:
		return "Redis leases (rueidis, 127.0.0.1:6379), SQLite on " + placeName(false)
	case b.mysql:
		return "MySQL store (MariaDB, 127.0.0.1:3306), memory leases"
	}
	return "data on " + placeName(b.tmpfs)
}

// prepare creates what the backend needs (a Redis prefix, a database) and
// returns the master's environment for it and how to remove it again.
func (b *dispatchBackend) prepare() (env []string, undo func(), err error) {
	undo = func() {}
	tag := fmt.Sprintf("%d_%d", os.Getpid(), time.Now().UnixNano())
	switch {
	case b.redis:
		prefix := "bench-dispatch-" + tag
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{benchRedisAddr}, DisableCache: true})
		if err != nil {
			return nil, undo, fmt.Errorf("cannot reach Redis at %s: %w", benchRedisAddr, err)
		}
		return []string{"REDIS_ADDR=" + benchRedisAddr, "REDIS_PREFIX=" + prefix},
			func() { dropPrefix(c, prefix); c.Close() }, nil
	case b.mysql:
		name := "rlsched_bench_" + tag
		root, err := sql.Open("mysql", benchMySQLServer)
		if err != nil {
			return nil, undo, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := root.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
			root.Close()
			return nil, undo, fmt.Errorf("cannot create a MySQL database on 127.0.0.1:3306: %w", err)
		}
		b.dsn = benchMySQLServer + name
		return []string{"MYSQL_DSN=" + b.dsn}, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = root.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
			root.Close()
		}, nil
	}
	return nil, undo, nil
}

// withEnv runs f with kv ("K=V") set in this process's environment, which
// startMaster passes on to the master (it appends its own settings to
// os.Environ()); scenarios run one at a time, so nothing else sees them.
func withEnv(kv []string, f func() error) error {
	var restore []func()
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		old, had := os.LookupEnv(k)
		_ = os.Setenv(k, v)
		restore = append(restore, func() {
			if had {
				_ = os.Setenv(k, old)
			} else {
				_ = os.Unsetenv(k)
			}
		})
	}
	defer func() {
		for _, r := range restore {
			r()
		}
	}()
	return f()
}

// preloadQueueMySQL is preloadQueue for the MySQL store: one run through
// store.CreateTask, the rest copies of its row made by INSERT … SELECT in
// one transaction (new ids, trace ids, creation times), the column list
// read from the table itself.
func preloadQueueMySQL(dsn string, n int, argv []string) error {
	ctx := context.Background()
	st, err := mysql.Open(dsn)
	if err != nil {
		return err
	}
	tmplID, err := createTemplateRun(ctx, st, argv)
	if err != nil {
		return err
	}
	if n <= 1 {
		return nil
	}
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		return err
	}
	cfg.InterpolateParams = true
	conn, err := driver.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	return copyRuns(ctx, db, `SELECT column_name FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = 'tasks' ORDER BY ordinal_position`,
		func(c string) string { return "`" + c + "`" }, tmplID, n)
}

// service is the process of a distributed backend's server (MariaDB,
// Redis), whose CPU a run costs there is measured beside the master's.
func (b dispatchBackend) service() string {
	switch {
	case b.redis:
		return "redis-server"
	case b.mysql:
		return "mariadbd"
	}
	return ""
}

// pidOf is the pid of a running process whose command name is comm (0:
// none).
func pidOf(comm string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.TrimSpace(string(b)) == comm {
			return pid
		}
	}
	return 0
}

// mysqlCounters are MariaDB's global counters of what the store's
// commits cost it: statements, commits and redo-log writes (MariaDB 10.11
// writes its redo log with O_DIRECT and counts no fsyncs of it).
var mysqlCounters = []string{"Questions", "Com_commit", "Innodb_log_writes"}

// mysqlStatus reads mysqlCounters.
func mysqlStatus() (map[string]int64, error) {
	db, err := sql.Open("mysql", benchMySQLServer)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('"+strings.Join(mysqlCounters, "','")+"')")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var v int64
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}
