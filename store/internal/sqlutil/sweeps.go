package sqlutil

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// The sweep queries both SQL backends share (their schema is one).

// InsertSweep is the INSERT of a sweep; PrepareSweep gives its arguments.
const InsertSweep = `INSERT INTO sweeps (id, name, project, user_id, max_parallel, members, spec, created_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?)`

// insertMembers starts the multi-row INSERT of sweep_members; each row is
// memberValues (the first without its leading comma).
const (
	insertMembers = `INSERT INTO sweep_members (sweep_id, member, task_id) VALUES `
	memberValues  = `, (?, ?, ?)`
)

// membersPerInsert bounds the rows of one multi-row INSERT into
// sweep_members: 3 placeholders each, far under SQLite's 32,766 and
// MySQL's 65,535.
const membersPerInsert = 1000

// InsertMembers makes ts[i] the latest run of member first+i of sweep id,
// in tx.
func InsertMembers(ctx context.Context, tx Execer, id string, ts []*core.Task, first int) error {
	for len(ts) > 0 {
		part := ts[:min(len(ts), membersPerInsert)]
		args := make([]any, 0, 3*len(part))
		for i, t := range part {
			args = append(args, id, first+i, t.ID)
		}
		q := insertMembers + memberValues[2:] + strings.Repeat(memberValues, len(part)-1)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
		ts, first = ts[len(part):], first+len(part)
	}
	return nil
}

// maxSweepName bounds a sweep's name and project as /api/train bounds a
// run's (in characters), so a backend's column always holds them.
const maxSweepName = 200

// PrepareSweep does CreateSweep's checks and defaults on sw and its
// members' first runs: it returns InsertSweep's arguments and the members'
// rows (sweepArgs, prepareMembers).
func PrepareSweep(sw *store.Sweep, members []*core.Task, now time.Time) ([]any, []TaskRow, error) {
	sargs, err := sweepArgs(sw, len(members))
	if err != nil {
		return nil, nil, err
	}
	rows, err := prepareMembers(sw.ID, members, now)
	if err != nil {
		return nil, nil, err
	}
	return sargs, rows, nil
}

// SweepOwner reads the username of a new sweep's owner from row (a
// SelectOwner); core.ErrNotFound when there is none.
func SweepOwner(row *sql.Row, userID int64) (string, error) {
	var owner string
	if err := row.Scan(&owner); errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("owner %d: %w", userID, core.ErrNotFound)
	} else if err != nil {
		return "", err
	}
	return owner, nil
}

// SweepCreated makes sw and its members, stored as rows, look as a later
// read will.
func SweepCreated(sw *store.Sweep, members []*core.Task, rows []TaskRow, owner string) {
	sw.User = owner
	for i, t := range members {
		t.User = owner
		Normalize(t, rows[i])
	}
}

// sweepArgs checks sw and returns InsertSweep's arguments for it with
// members members; sw.Spec is compacted.
func sweepArgs(sw *store.Sweep, members int) ([]any, error) {
	if !core.ValidTaskID(sw.ID) {
		return nil, fmt.Errorf("cannot create sweep %q: invalid id", sw.ID)
	}
	if utf8.RuneCountInString(sw.Name) > maxSweepName || utf8.RuneCountInString(sw.Project) > maxSweepName {
		return nil, fmt.Errorf("cannot create sweep %s: name and project must be at most %d characters", sw.ID, maxSweepName)
	}
	if sw.MaxParallel < 0 {
		return nil, fmt.Errorf("cannot create sweep %s: negative maxParallel", sw.ID)
	}
	spec := bytes.TrimSpace(sw.Spec)
	if len(spec) == 0 {
		spec = []byte("{}")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, spec); err != nil {
		return nil, fmt.Errorf("cannot create sweep %s: spec is not JSON: %w", sw.ID, err)
	}
	created, err := Nanos(sw.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("cannot create sweep %s: %w", sw.ID, err)
	}
	sw.Spec, sw.Members = buf.Bytes(), members
	sw.CreatedAt = Time(created)
	return []any{sw.ID, sw.Name, sw.Project, sw.UserID, sw.MaxParallel, members, buf.String(), created}, nil
}

// prepareMembers does CreateTask's checks and defaults on each member's
// first run, marks it a member of sweep id and encodes it. Every run needs
// an id of its own, given by the caller.
func prepareMembers(id string, ts []*core.Task, now time.Time) ([]TaskRow, error) {
	rows := make([]TaskRow, len(ts))
	for i, t := range ts {
		if t.ID == "" {
			return nil, fmt.Errorf("cannot create sweep %s: member %d has no run id", id, i)
		}
		t.SweepID = id
		r, err := PrepareCreate(t, now)
		if err != nil {
			return nil, fmt.Errorf("cannot create sweep %s: member %d: %w", id, i, err)
		}
		rows[i] = r
	}
	return rows, nil
}

// sweepCols selects a sweep with its owner's username; scanSweep reads them.
const sweepCols = `SELECT s.id, s.name, s.project, s.user_id, u.username, s.max_parallel, s.members,
	s.spec, s.created_at FROM sweeps s JOIN users u ON u.id = s.user_id `

func scanSweep(sc Scanner) (store.Sweep, error) {
	var sw store.Sweep
	var spec string
	var created int64
	err := sc.Scan(&sw.ID, &sw.Name, &sw.Project, &sw.UserID, &sw.User, &sw.MaxParallel, &sw.Members, &spec, &created)
	sw.Spec, sw.CreatedAt = json.RawMessage(spec), Time(created)
	return sw, err
}

// Sweep implements store.Store.
func (s *Shared) Sweep(ctx context.Context, id string) (store.Sweep, error) {
	return readTx(ctx, s.c.Snapshot, func(tx *sql.Tx) (store.Sweep, error) { return getSweep(ctx, tx, id) })
}

// ListSweeps implements store.Store.
func (s *Shared) ListSweeps(ctx context.Context, f store.SweepFilter) ([]store.Sweep, string, error) {
	var next string
	sws, err := readTx(ctx, s.c.Snapshot, func(tx *sql.Tx) ([]store.Sweep, error) {
		sws, n, err := listSweeps(ctx, tx, f)
		next = n
		return sws, err
	})
	return sws, next, err
}

// SweepRuns implements store.Store.
func (s *Shared) SweepRuns(ctx context.Context, id string) ([]core.Task, error) {
	return readTx(ctx, s.c.Snapshot, func(tx *sql.Tx) ([]core.Task, error) { return sweepRuns(ctx, tx, id) })
}

// SweepLimits implements store.Store.
func (s *Shared) SweepLimits(ctx context.Context, ids []string) (map[string]core.SweepLimit, error) {
	return sweepLimits(ctx, s.c.HotRead, ids)
}

// getSweep returns the sweep with id and its Counts; core.ErrNotFound.
func getSweep(ctx context.Context, db Querier, id string) (store.Sweep, error) {
	sws, err := querySweeps(ctx, db, sweepCols+`WHERE s.id = ?`, id)
	if err != nil {
		return store.Sweep{}, fmt.Errorf("cannot read sweep %s: %w", id, err)
	}
	if len(sws) == 0 {
		return store.Sweep{}, fmt.Errorf("cannot find sweep %s: %w", id, core.ErrNotFound)
	}
	return sws[0], nil
}

// listSweeps returns one page of sweeps newest first, with Counts, and the
// cursor of the next page; cursors are ListTasks'.
func listSweeps(ctx context.Context, db Querier, f store.SweepFilter) ([]store.Sweep, string, error) {
	var where []string
	var args []any
	if f.User != "" {
		where, args = append(where, "u.username = ?"), append(args, f.User)
	}
	if f.Cursor != "" {
		at, id, err := DecodeCursor(f.Cursor)
		if err != nil {
			return nil, "", fmt.Errorf("cannot list sweeps: %w", err)
		}
		where = append(where, "(s.created_at < ? OR (s.created_at = ? AND s.id < ?))")
		args = append(args, at, at, id)
	}
	q := sweepCols
	if len(where) > 0 {
		q += "WHERE " + strings.Join(where, " AND ")
	}
	limit := Limit(f.Limit)
	q += " ORDER BY s.created_at DESC, s.id DESC LIMIT ?"
	args = append(args, limit+1)
	sws, err := querySweeps(ctx, db, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("cannot list sweeps: %w", err)
	}
	next := ""
	if len(sws) > limit {
		sws = sws[:limit]
		last := sws[limit-1]
		next = EncodeCursor(last.CreatedAt.UnixNano(), last.ID)
	}
	return sws, next, nil
}

// querySweeps runs a sweepCols query and fills the Counts of what it found
// with one more query.
func querySweeps(ctx context.Context, db Querier, q string, args ...any) ([]store.Sweep, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	out := []store.Sweep{}
	for rows.Next() {
		sw, err := scanSweep(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, sw)
	}
	err = rows.Err()
	rows.Close()
	if err != nil || len(out) == 0 {
		return out, err
	}
	ids := make([]any, len(out))
	at := make(map[string]int, len(out))
	for i := range out {
		ids[i], at[out[i].ID] = out[i].ID, i
		out[i].Counts = zeroCounts()
	}
	// The counts are of each member's latest run: sweep_members points at it.
	rows, err = db.QueryContext(ctx, `SELECT sm.sweep_id, t.status, COUNT(*) FROM sweep_members sm
		JOIN tasks t ON t.id = sm.task_id WHERE sm.sweep_id IN (?`+strings.Repeat(", ?", len(ids)-1)+`)
		GROUP BY sm.sweep_id, t.status`, ids...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, st string
		var n int
		if err := rows.Scan(&id, &st, &n); err != nil {
			return nil, err
		}
		out[at[id]].Counts[core.Status(st)] = n
	}
	return out, rows.Err()
}

func zeroCounts() map[core.Status]int {
	m := map[core.Status]int{}
	for _, st := range core.Statuses() {
		m[st] = 0
	}
	return m
}

// sweepExists returns core.ErrNotFound unless sweep id exists.
func sweepExists(ctx context.Context, db Querier, id string) error {
	rows, err := db.QueryContext(ctx, `SELECT 1 FROM sweeps WHERE id = ?`, id)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return core.ErrNotFound
	}
	return nil
}

// latestRuns selects each member's latest run of a sweep (one ?), the
// member number first, in member order.
var latestRuns = `SELECT sm.member, ` + strings.TrimPrefix(TaskCols, "SELECT ") +
	`JOIN sweep_members sm ON sm.task_id = t.id WHERE sm.sweep_id = ? `

// memberScanner reads a latestRuns row: the member, then ScanTask's columns.
type memberScanner struct {
	rows   *sql.Rows
	member int
}

func (m *memberScanner) Scan(dest ...any) error {
	return m.rows.Scan(append([]any{&m.member}, dest...)...)
}

// Member is one member's latest run.
type Member struct {
	Index int
	Task  core.Task
}

// LatestRuns returns the latest run of the members of sweep id in member
// order, only those in a status of statuses when it is given;
// core.ErrNotFound for an unknown sweep.
func LatestRuns(ctx context.Context, db Querier, id string, statuses ...core.Status) ([]Member, error) {
	if err := sweepExists(ctx, db, id); err != nil {
		return nil, fmt.Errorf("cannot read sweep %s: %w", id, err)
	}
	q := latestRuns
	args := []any{id}
	if len(statuses) > 0 {
		q += `AND t.status IN (?` + strings.Repeat(", ?", len(statuses)-1) + `) `
		for _, st := range statuses {
			args = append(args, string(st))
		}
	}
	rows, err := db.QueryContext(ctx, q+`ORDER BY sm.member`, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot read the runs of sweep %s: %w", id, err)
	}
	defer rows.Close()
	out := []Member{}
	ms := &memberScanner{rows: rows}
	for rows.Next() {
		t, err := ScanTask(ms)
		if err != nil {
			return nil, fmt.Errorf("cannot read the runs of sweep %s: %w", id, err)
		}
		out = append(out, Member{Index: ms.member, Task: t})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read the runs of sweep %s: %w", id, err)
	}
	return out, nil
}

// sweepRuns is LatestRuns' tasks alone.
func sweepRuns(ctx context.Context, db Querier, id string) ([]core.Task, error) {
	ms, err := LatestRuns(ctx, db, id)
	if err != nil {
		return nil, err
	}
	out := make([]core.Task, len(ms))
	for i, m := range ms {
		out[i] = m.Task
	}
	return out, nil
}

// MoveMember is the compare-and-swap that makes a new run a member's
// latest: it matches only while the member's latest is still the old run.
const MoveMember = `UPDATE sweep_members SET task_id = ? WHERE sweep_id = ? AND member = ? AND task_id = ?`

// Retried makes the runs a retry created, stored as rows, look as a later
// read will, and returns them.
func Retried(created []*core.Task, rows []TaskRow) []core.Task {
	out := make([]core.Task, len(created))
	for i, t := range created {
		Normalize(t, rows[i])
		out[i] = *t
	}
	return out
}

// PrepareRetry makes member m's new run with rerun and encodes it: created
// as CreateTask creates one, a member of sweep id, rerunning m's latest
// run unless rerun says otherwise.
func PrepareRetry(id string, m Member, rerun func(core.Task) core.Task, now time.Time) (*core.Task, TaskRow, error) {
	nt := rerun(m.Task)
	if nt.ID == "" {
		nt.ID = core.NewTaskID()
	}
	if nt.RerunOf == "" {
		nt.RerunOf = m.Task.ID
	}
	nt.SweepID = id
	r, err := PrepareCreate(&nt, now)
	if err != nil {
		return nil, r, fmt.Errorf("cannot retry member %d of sweep %s: %w", m.Index, id, err)
	}
	return &nt, r, nil
}

// SweepLimitsQuery reads the limits of n sweeps. The active count's
// condition is spelled as SQLite's partial index tasks_sweep_active is, so
// that the index serves the count.
func SweepLimitsQuery(n int) string {
	return `SELECT s.id, s.max_parallel, (SELECT COUNT(*) FROM tasks t
		WHERE t.sweep_id = s.id AND t.sweep_id <> '' AND t.status IN ('DISPATCHED', 'RUNNING'))
		FROM sweeps s WHERE s.max_parallel > 0 AND s.id IN (?` + strings.Repeat(", ?", n-1) + `)`
}

// sweepLimits returns the capped sweeps among ids with their active members.
func sweepLimits(ctx context.Context, db Querier, ids []string) (map[string]core.SweepLimit, error) {
	out := map[string]core.SweepLimit{}
	for len(ids) > 0 {
		part := ids[:min(len(ids), cancelChunk)]
		ids = ids[len(part):]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		rows, err := db.QueryContext(ctx, SweepLimitsQuery(len(part)), args...)
		if err != nil {
			return nil, fmt.Errorf("cannot read sweep limits: %w", err)
		}
		for rows.Next() {
			var id string
			var l core.SweepLimit
			if err := rows.Scan(&id, &l.MaxParallel, &l.Active); err != nil {
				rows.Close()
				return nil, fmt.Errorf("cannot read sweep limits: %w", err)
			}
			out[id] = l
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("cannot read sweep limits: %w", err)
		}
	}
	return out, nil
}

// GrowSweep is the compare-and-swap of AddSweepMembers: the sweep's member
// count moves from the count its caller read to the new one, so of two
// masters proposing the same members only one adds them.
const GrowSweep = `UPDATE sweeps SET members = ? WHERE id = ? AND members = ?`

// GrowTx is the part of AddSweepMembers both backends share, in tx: the
// compare-and-swap on the member count first (so a loser writes nothing),
// then the members made the owner's runs and checked. It returns their
// rows, for the backend's insert, and the owner's name.
func GrowTx(ctx context.Context, tx *sql.Tx, id string, from int, members []*core.Task, now time.Time) ([]TaskRow, string, error) {
	res, err := tx.ExecContext(ctx, GrowSweep, from+len(members), id, from)
	if err != nil {
		return nil, "", err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, "", err
	}
	if err := Grown(ctx, tx, id, n); err != nil {
		return nil, "", err
	}
	owner, err := OwnMembers(tx.QueryRowContext(ctx, SelectSweepOwner, id), id, members)
	if err != nil {
		return nil, "", err
	}
	rows, err := PrepareGrow(id, from, members, now)
	return rows, owner, err
}

// PrepareGrow does AddSweepMembers' checks and defaults on the new
// members' runs and returns their rows.
func PrepareGrow(id string, from int, members []*core.Task, now time.Time) ([]TaskRow, error) {
	if from < 0 || len(members) == 0 {
		return nil, fmt.Errorf("cannot add members to sweep %s: %d members from %d", id, len(members), from)
	}
	return prepareMembers(id, members, now)
}

// Grown reports a GrowSweep that changed no row: core.ErrNotFound for an
// unknown sweep, else core.ErrConflict (its count is no longer from).
func Grown(ctx context.Context, db Querier, id string, n int64) error {
	if n == 1 {
		return nil
	}
	if err := sweepExists(ctx, db, id); err != nil {
		return err
	}
	return fmt.Errorf("its members were added meanwhile: %w", core.ErrConflict)
}

// SelectSweepOwner reads a sweep's owner (one ?, the sweep's id): new
// members are the owner's runs, whoever proposes them.
const SelectSweepOwner = `SELECT s.user_id, u.username FROM sweeps s JOIN users u ON u.id = s.user_id WHERE s.id = ?`

// OwnMembers makes members the runs of the sweep's owner read by row (a
// SelectSweepOwner); core.ErrNotFound for an unknown sweep.
func OwnMembers(row *sql.Row, id string, members []*core.Task) (string, error) {
	var uid int64
	var owner string
	if err := row.Scan(&uid, &owner); errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("sweep %s: %w", id, core.ErrNotFound)
	} else if err != nil {
		return "", err
	}
	for _, t := range members {
		t.UserID = uid
	}
	return owner, nil
}

// KeepSweepDecisions implements store.Store in one transaction.
func (s *Shared) KeepSweepDecisions(ctx context.Context, id string, ds []store.SweepDecision) error {
	if len(ds) == 0 {
		return nil
	}
	err := s.c.InTx(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, s.d.KeepDecision)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, d := range ds {
			if _, err := st.ExecContext(ctx, id, d.TaskID, d.Rung, d.Step, d.Value, d.Cut, d.Peers, d.Stop,
				d.DecidedAt.UnixNano()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot keep the decisions of sweep %s: %w", id, err)
	}
	return nil
}

// SweepDecisions implements store.Store.
func (s *Shared) SweepDecisions(ctx context.Context, id string) ([]store.SweepDecision, error) {
	rows, err := s.c.Read.QueryContext(ctx, `SELECT task_id, rung, step, value, cut, peers, stop, decided_at
		FROM sweep_decisions WHERE sweep_id = ? ORDER BY rung, decided_at, task_id`, id)
	if err != nil {
		return nil, fmt.Errorf("cannot read the decisions of sweep %s: %w", id, err)
	}
	defer rows.Close()
	var out []store.SweepDecision
	for rows.Next() {
		var d store.SweepDecision
		var at int64
		if err := rows.Scan(&d.TaskID, &d.Rung, &d.Step, &d.Value, &d.Cut, &d.Peers, &d.Stop, &at); err != nil {
			return nil, fmt.Errorf("cannot read the decisions of sweep %s: %w", id, err)
		}
		d.DecidedAt = time.Unix(0, at)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read the decisions of sweep %s: %w", id, err)
	}
	return out, nil
}
