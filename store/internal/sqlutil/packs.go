package sqlutil

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// Metric packs: the series of an ended run stored as one value per (run,
// name) beside its rows in metrics, so a sweep's curves read one row per
// member instead of one per point. Reading 10,000 runs × 500 points as
// rows took 4–5 s on SQLite (most of it database/sql's per-row cost);
// packed, the same read is ~10,000 rows. A pack is made when a sweep's
// series are read and a member's latest run has ended; a write of points
// to the run drops its packs (AppendMetrics), so a pack never hides a late
// point. Since issue 33 a run's series is packed when its end is
// committed (store.PackingAtEnd calls PackSeries); the first read packs
// what that missed.

// MaxPackPoints bounds one pack (≈ 9 bytes a point): a longer series stays
// in rows only, and MySQL's packet limit is never near.
const MaxPackPoints = 256 << 10

const packVersion = 1

// EncodePack packs a series ([step, value] in step order, steps integers
// as the store keeps them): a version byte, the count, then each point as
// the zigzag varint of its step's difference to the previous step and the
// value's 8 bytes.
func EncodePack(pts [][2]float64) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(pts)*10)
	b = append(b, packVersion)
	b = binary.AppendUvarint(b, uint64(len(pts)))
	prev := int64(0)
	for _, p := range pts {
		step := int64(p[0])
		b = binary.AppendVarint(b, step-prev)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p[1]))
		prev = step
	}
	return b
}

var errBadPack = errors.New("malformed metric pack")

// DecodePack is the inverse of EncodePack.
func DecodePack(b []byte) ([][2]float64, error) { return appendPack(nil, b) }

// appendPack appends the points of pack b to dst: a sweep's read decodes
// every member's pack into one slab rather than a slice each.
func appendPack(dst [][2]float64, b []byte) ([][2]float64, error) {
	if len(b) == 0 || b[0] != packVersion {
		return nil, errBadPack
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	// Each point takes at least 9 bytes: a count beyond that is corrupt.
	if k <= 0 || n > uint64(len(b))/9 {
		return nil, errBadPack
	}
	b = b[k:]
	dst = slices.Grow(dst, int(n))
	start := len(dst)
	dst = dst[:start+int(n)]
	out := dst[start:]
	step := int64(0)
	for i := range out {
		d, k := binary.Varint(b)
		if k <= 0 || len(b) < k+8 {
			return nil, errBadPack
		}
		step += d
		out[i] = [2]float64{float64(step), math.Float64frombits(binary.LittleEndian.Uint64(b[k:]))}
		b = b[k+8:]
	}
	if len(b) != 0 {
		return nil, errBadPack
	}
	return dst, nil
}

// The queries of SweepSeries: a sweep's latest runs (sweep id), their
// packed series (name, sweep id), and the others' points as rows, each
// run's in step order (name, sweep id, name).
const (
	SeriesMembersQuery = `SELECT t.id, t.params, t.status, t.final_reward FROM sweep_members sm
		JOIN tasks t ON t.id = sm.task_id WHERE sm.sweep_id = ? ORDER BY sm.member`
	SeriesPacksQuery = `SELECT p.task_id, p.data FROM sweep_members sm
		JOIN metric_packs p ON p.task_id = sm.task_id AND p.name = ? WHERE sm.sweep_id = ?`
	SeriesRowsQuery = `SELECT m.task_id, m.step, m.value FROM sweep_members sm
		JOIN metrics m ON m.task_id = sm.task_id AND m.name = ?
		WHERE sm.sweep_id = ? AND NOT EXISTS (SELECT 1 FROM metric_packs p WHERE p.task_id = sm.task_id AND p.name = ?)
		ORDER BY sm.member, m.step`
)

// Pack is a series to store packed: Points rows of (TaskID, Name) in
// metrics when it was read.
type Pack struct {
	TaskID, Name string
	Points       int
	Data         []byte
}

// SweepSeries reads series name of every member's latest run of sweep id
// (packsIndex as SeriesVersion's) on db, which must be one read transaction (so that packs and rows come
// from one snapshot): the members in one query, packed series in one more,
// the others' rows in a third. It returns the members in member order and
// the packs to make of the ended runs it read as rows; core.ErrNotFound
// for an unknown sweep.
func SweepSeries(ctx context.Context, db Querier, id, name, packsIndex string) ([]store.MemberSeries, Version, []Pack, error) {
	fail := func(err error) ([]store.MemberSeries, Version, []Pack, error) {
		return nil, Version{}, nil, fmt.Errorf("cannot read the metrics of sweep %s: %w", id, err)
	}
	var version Version
	if name == "" {
		if err := sweepExists(ctx, db, id); err != nil {
			return fail(err)
		}
	} else if v, err := SeriesVersion(ctx, db, id, name, packsIndex); err != nil {
		return fail(err)
	} else {
		version = v
	}
	rows, err := db.QueryContext(ctx, SeriesMembersQuery, id)
	if err != nil {
		return fail(err)
	}
	out := []store.MemberSeries{}
	at := map[string]int{}
	for rows.Next() {
		var m store.MemberSeries
		var params *string
		var st string
		if err := rows.Scan(&m.TaskID, &params, &st, &m.FinalReward); err != nil {
			rows.Close()
			return fail(err)
		}
		m.Params, m.Status = DecodeParams(params), core.Status(st)
		at[m.TaskID] = len(out)
		out = append(out, m)
	}
	err = rows.Err()
	rows.Close()
	if err != nil || name == "" {
		if err != nil {
			return fail(err)
		}
		return out, version, nil, nil
	}

	rows, err = db.QueryContext(ctx, SeriesPacksQuery, name, id)
	if err != nil {
		return fail(err)
	}
	// One slab for every pack's points (the version counted them in this
	// snapshot), each member's series a full slice of it.
	slab := make([][2]float64, 0, version.points)
	for rows.Next() {
		var tid string
		var data sql.RawBytes // decoded before the next row: no copy of the pack
		if err := rows.Scan(&tid, &data); err != nil {
			rows.Close()
			return fail(err)
		}
		start := len(slab)
		if slab, err = appendPack(slab, data); err != nil {
			rows.Close()
			return fail(fmt.Errorf("run %s: %w", tid, err))
		}
		if i, ok := at[tid]; ok {
			out[i].Points = slab[start:len(slab):len(slab)]
		}
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return fail(err)
	}

	// Every member packed (their ends packed them, PackingAtEnd): no rows
	// to read, and the query would still look up each member's pack.
	if version.packs == version.members {
		return out, version, nil, nil
	}
	rows, err = db.QueryContext(ctx, SeriesRowsQuery, name, id, name)
	if err != nil {
		return fail(err)
	}
	defer rows.Close()
	var unpacked []int
	last := -1
	for rows.Next() {
		var tid string
		var step int64
		var v float64
		if err := rows.Scan(&tid, &step, &v); err != nil {
			return fail(err)
		}
		i, ok := at[tid]
		if !ok {
			continue
		}
		if i != last {
			unpacked, last = append(unpacked, i), i
		}
		out[i].Points = append(out[i].Points, [2]float64{float64(step), v})
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	// The ended runs' series are complete: packed, the next read is cheap.
	var packs []Pack
	for _, i := range unpacked {
		if m := out[i]; m.Status.Terminal() && len(m.Points) <= MaxPackPoints {
			packs = append(packs, Pack{TaskID: m.TaskID, Name: name, Points: len(m.Points), Data: EncodePack(m.Points)})
		}
	}
	return out, version, packs, nil
}

// Version is the state of a sweep's series as SweepSeriesVersion names
// it: the members' count and how many ended, their latest runs' last
// change (a retry's new run, a status, a final reward), and the count and
// points of their packs of the name (a late point drops its run's pack,
// and packing it again adds a point). The points of ended runs not packed
// yet are not in it: the read that packs them adds them (Packed).
type Version struct {
	members, ended, changed, packs, points int64
}

// String is "" while a member's latest run has not ended (its series
// still grows: never reuse), else the figures.
func (v Version) String() string {
	if v.ended < v.members || v.members == 0 {
		return ""
	}
	return fmt.Sprintf("%d:%d:%d:%d", v.members, v.changed, v.packs, v.points)
}

// Packed is v once the packs ps were written: what SeriesVersion reads
// after them if nothing else changed (a concurrent late point makes it
// differ, so an answer kept at Packed is then not reused).
func (v Version) Packed(ps []Pack) Version {
	for _, p := range ps {
		v.packs++
		v.points += int64(p.Points)
	}
	return v
}

// SeriesVersion is SweepSeriesVersion on db; core.ErrNotFound for an
// unknown sweep. packsIndex is the backend's hint that makes the packs'
// points come from their index (SeriesVersionQuery).
func SeriesVersion(ctx context.Context, db Querier, id, name, packsIndex string) (Version, error) {
	var v Version
	if err := sweepExists(ctx, db, id); err != nil {
		return v, err
	}
	rows, err := db.QueryContext(ctx, SeriesVersionQuery(packsIndex), name, id)
	if err != nil {
		return v, err
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(&v.members, &v.ended, &v.changed, &v.packs, &v.points); err != nil {
			return v, err
		}
	}
	return v, rows.Err()
}

// SeriesVersionQuery reads a Version (name, sweep id). packsIndex, the
// backend's spelling of "use index metric_packs_points" for the packs,
// makes their points come from that index, not from their rows, which
// hold the series (without it, the planners pick the primary key).
func SeriesVersionQuery(packsIndex string) string {
	return `SELECT COUNT(*),
	COALESCE(SUM(CASE WHEN t.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMEOUT') THEN 1 ELSE 0 END), 0),
	COALESCE(MAX(t.updated_at), 0), COUNT(p.task_id), COALESCE(SUM(p.points), 0)
	FROM sweep_members sm JOIN tasks t ON t.id = sm.task_id
	LEFT JOIN metric_packs p ` + packsIndex + ` ON p.task_id = sm.task_id AND p.name = ?
	WHERE sm.sweep_id = ?`
}

// PackArgs are the arguments of a backend's conditional pack INSERT:
// task_id, name, points, data, then task_id, name and points again for
// its check that the run still has exactly that many points of the name
// (a point written since the read makes the pack stale, so it is not made).
func PackArgs(p Pack) []any {
	return []any{p.TaskID, p.Name, p.Points, p.Data, p.TaskID, p.Name, p.Points}
}

// PacksPerTx bounds the packs one transaction writes, so that a large
// sweep's first read does not hold SQLite's only writer for long.
const PacksPerTx = 500

// SweepDialect is how a backend reads and writes a sweep's packed series.
type SweepDialect struct {
	// PacksIndex makes a sweep's version read its packs' points from
	// their index (SeriesVersionQuery).
	PacksIndex string
	// InsertPack writes a pack only while its run still has the points it
	// was made of, and leaves one written meanwhile alone: args PackArgs.
	InsertPack string
	// PreparePack prepares InsertPack once per transaction of packs
	// rather than sending it for every pack.
	PreparePack bool
}

// SweepMetrics implements store.Store: one read transaction (Snapshot)
// for the reads, then the packs of the ended runs it read as rows
// (writePacks). A run's series is normally packed at its end
// (PackSeries); this covers the runs whose end was not followed by one (a
// master restarted meanwhile, a full packer queue, a late point). The
// version is the one the packs written leave (Version.Packed).
func (s *Shared) SweepMetrics(ctx context.Context, id, name string) ([]store.MemberSeries, string, error) {
	var packs []Pack
	var version Version
	out, err := readTx(ctx, s.c.Snapshot, func(tx *sql.Tx) ([]store.MemberSeries, error) {
		out, v, p, err := SweepSeries(ctx, tx, id, name, s.d.Sweep.PacksIndex)
		version, packs = v, p
		return out, err
	})
	if err != nil {
		return nil, "", err
	}
	return out, version.Packed(s.writePacks(ctx, packs)).String(), nil
}

// writePacks writes packs in transactions of PacksPerTx, so other writers
// are not held up, and returns those written (a pack whose run gained a
// point since it was read is not). A pack that cannot be written costs the
// next read only.
func (s *Shared) writePacks(ctx context.Context, packs []Pack) []Pack {
	var written []Pack
	for len(packs) > 0 {
		part := packs[:min(len(packs), PacksPerTx)]
		packs = packs[len(part):]
		var made []Pack
		err := s.c.InTx(ctx, func(tx *sql.Tx) error {
			made = made[:0]
			exec := func(args ...any) (sql.Result, error) { return tx.ExecContext(ctx, s.d.Sweep.InsertPack, args...) }
			if s.d.Sweep.PreparePack {
				st, err := tx.PrepareContext(ctx, s.d.Sweep.InsertPack)
				if err != nil {
					return err
				}
				defer st.Close()
				exec = func(args ...any) (sql.Result, error) { return st.ExecContext(ctx, args...) }
			}
			for _, p := range part {
				res, err := exec(PackArgs(p)...)
				if err != nil {
					return err
				}
				if n, _ := res.RowsAffected(); n == 1 {
					made = append(made, p)
				}
			}
			return nil
		})
		if err == nil {
			written = append(written, made...)
		}
	}
	return written
}

// packRunsPerRead bounds the runs of one read of PackSeries (the IN list).
const packRunsPerRead = 256

// EndedSeriesQuery reads every point of the ended runs among n ids, by run,
// name and step (the metrics key's order).
func EndedSeriesQuery(n int) string {
	return `SELECT m.task_id, m.name, m.step, m.value FROM tasks t JOIN metrics m ON m.task_id = t.id
		WHERE t.id IN (?` + strings.Repeat(`, ?`, n-1) + `) AND t.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMEOUT')
		AND NOT EXISTS (SELECT 1 FROM metric_packs p WHERE p.task_id = t.id)
		ORDER BY m.task_id, m.name, m.step`
}

// PackSeries implements store.Store: the series of the ended runs among
// ids, every name, read in one snapshot per packRunsPerRead runs and
// written as SweepMetrics writes its packs (the same conditional INSERT,
// so a point written since the read, or a pack another writer made, wins).
// A run that has packs already is skipped: packs are dropped whole when a
// point arrives.
func (s *Shared) PackSeries(ctx context.Context, ids []string) error {
	for len(ids) > 0 {
		part := ids[:min(len(ids), packRunsPerRead)]
		ids = ids[len(part):]
		packs, err := readTx(ctx, s.c.Snapshot, func(tx *sql.Tx) ([]Pack, error) {
			return endedSeries(ctx, tx, part)
		})
		if err != nil {
			return fmt.Errorf("cannot pack the series of %d runs: %w", len(part), err)
		}
		s.writePacks(ctx, packs)
	}
	return nil
}

// endedSeries reads the packs to make of the ended runs among ids.
func endedSeries(ctx context.Context, db Querier, ids []string) ([]Pack, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := db.QueryContext(ctx, EndedSeriesQuery(len(ids)), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var packs []Pack
	var tid, name string
	var pts [][2]float64
	flush := func() {
		if len(pts) > 0 && len(pts) <= MaxPackPoints {
			packs = append(packs, Pack{TaskID: tid, Name: name, Points: len(pts), Data: EncodePack(pts)})
		}
		pts = pts[:0]
	}
	for rows.Next() {
		var t, n string
		var step int64
		var v float64
		if err := rows.Scan(&t, &n, &step, &v); err != nil {
			return nil, err
		}
		if t != tid || n != name {
			flush()
			tid, name = t, n
		}
		pts = append(pts, [2]float64{float64(step), v})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	flush()
	return packs, nil
}

// SweepSeriesVersion implements store.Store.
func (s *Shared) SweepSeriesVersion(ctx context.Context, id, name string) (string, error) {
	v, err := SeriesVersion(ctx, s.c.HotRead, id, name, s.d.Sweep.PacksIndex)
	if err != nil {
		return "", fmt.Errorf("cannot read the version of sweep %s: %w", id, err)
	}
	return v.String(), nil
}
