package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/sqlite"
)

// ensureUser returns the id of the bench user, creating it (with a real
// password hash, so REST login works) in a fresh store.
func ensureUser(st store.Store) (int64, error) {
	ctx := context.Background()
	if u, err := st.UserByName(ctx, benchUser); err == nil {
		return u.ID, nil
	} else if !errors.Is(err, core.ErrNotFound) {
		return 0, err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(benchPassword), bcrypt.MinCost)
	if err != nil {
		return 0, err
	}
	u := core.User{Username: benchUser, PasswordHash: string(hash), Role: core.RoleUser}
	if err := st.CreateUser(ctx, &u); err != nil {
		return 0, fmt.Errorf("cannot create the bench user: %w", err)
	}
	return u.ID, nil
}

// createTemplateRun stores, through store.CreateTask (the production
// insert), the run the preloads copy, closes st and returns the run's id.
func createTemplateRun(ctx context.Context, st store.Store, argv []string) (string, error) {
	defer st.Close()
	uid, err := ensureUser(st)
	if err != nil {
		return "", err
	}
	tmpl := core.Task{UserID: uid, Name: "bench", Command: argv, Attempt: 1, MaxRetries: 0,
		Env: map[string]string{}, Tags: []string{}, TraceID: core.NewTraceID()}
	if err := st.CreateTask(ctx, &tmpl); err != nil {
		return "", fmt.Errorf("cannot create the template run: %w", err)
	}
	return tmpl.ID, nil
}

// preloadQueue puts n QUEUED runs of argv into the SQLite store at dbPath
// in one transaction, while the master may be running (WAL lets another
// process write; the master's scheduler sees the rows at its next pass, at
// most a second later).
//
// One run is created through store.CreateTask, the production insert; the
// others are copies of its row made by SQL with new ids, trace ids and
// creation times, so the queue is exactly what the store would hold, and n
// runs cost one fsync instead of n. The copy reads the column list from the
// table itself, so it follows schema changes.
func preloadQueue(dbPath string, n int, argv []string) error {
	ctx := context.Background()
	st, err := sqlite.Open(dbPath)
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
	db, err := sql.Open("sqlite", dbPath+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	return copyRuns(ctx, db, `SELECT name FROM pragma_table_info('tasks') ORDER BY cid`, func(c string) string { return c }, tmplID, n)
}

// copyRuns inserts n-1 copies of run tmplID in one transaction, each with
// a new id and trace id and creation times 1 ns apart (FIFO order). The
// column list comes from the table itself (colsQuery), so the copy follows
// schema changes; quote quotes a column name in the backend's dialect.
func copyRuns(ctx context.Context, db *sql.DB, colsQuery string, quote func(string) string, tmplID string, n int) error {
	rows, err := db.QueryContext(ctx, colsQuery)
	if err != nil {
		return fmt.Errorf("cannot read the tasks columns: %w", err)
	}
	var cols, exprs, kinds []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			rows.Close()
			return err
		}
		cols = append(cols, quote(c))
		switch c {
		case "id", "trace_id":
			exprs, kinds = append(exprs, "?"), append(kinds, c)
		case "created_at", "updated_at":
			exprs, kinds = append(exprs, quote(c)+" + ?"), append(kinds, "offset")
		default:
			exprs = append(exprs, quote(c))
		}
	}
	rows.Close()
	q := fmt.Sprintf("INSERT INTO tasks (%s) SELECT %s FROM tasks WHERE id = ?",
		strings.Join(cols, ", "), strings.Join(exprs, ", "))
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, q)
	if err != nil {
		return fmt.Errorf("cannot prepare the queue copy: %w", err)
	}
	defer stmt.Close()
	base := time.Now().UnixMilli()
	args := make([]any, len(kinds)+1)
	for i := 1; i < n; i++ {
		for j, k := range kinds {
			switch k {
			case "id":
				args[j] = fmt.Sprintf("r%011xb%09d", base, i)
			case "trace_id":
				args[j] = core.NewTraceID()
			case "offset":
				args[j] = int64(i) // nanoseconds: keeps FIFO order
			}
		}
		args[len(kinds)] = tmplID
		if _, err := stmt.ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("cannot copy run %d: %w", i, err)
		}
	}
	return tx.Commit()
}

// runTimes reads the start and end of every run in status s started after
// since from the store at dbPath (read-only use) and returns the span from
// the first start to the last end, and how many there were.
func runTimes(dbPath string, s core.Status, since time.Time) (first, last time.Time, n int, err error) {
	st, err := sqlite.Open(dbPath)
	if err != nil {
		return first, last, 0, err
	}
	defer st.Close()
	f := store.Filter{Status: s, Limit: 500}
	for {
		ts, next, err := st.ListTasks(context.Background(), f)
		if err != nil {
			return first, last, n, err
		}
		for _, t := range ts {
			if t.StartedAt == nil || t.FinishedAt == nil || t.StartedAt.Before(since) {
				continue
			}
			n++
			if first.IsZero() || t.StartedAt.Before(first) {
				first = *t.StartedAt
			}
			if t.FinishedAt.After(last) {
				last = *t.FinishedAt
			}
		}
		if next == "" {
			return first, last, n, nil
		}
		f.Cursor = next
	}
}

// countStatus returns how many runs of the store at dbPath are in each status.
func countStatus(dbPath string) (map[core.Status]int, error) {
	st, err := sqlite.Open(dbPath)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return st.CountByStatus(context.Background())
}
