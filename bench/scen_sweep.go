package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/rlsched/rlsched/store/sqlite"
)

// runSweep measures issue 17's two figures on a real master with its
// SQLite store on disk: POST /api/sweeps of 10,000 members (one
// transaction), beside the same runs submitted one by one to POST
// /api/train; then, with those members ended and 500 points of
// episode_reward each, the group statistics: GET /api/sweeps/{id}/metrics
// (step-aligned mean ± std curves, read from the series packed at the
// members' ends, and as rows when none were) and GET /api/sweeps/{id}
// (the groups' final rewards, with and without the 10,000 runs).
func runSweep(e *env) (*report, error) {
	members := pick(e, 1_000, 10_000)
	const seeds, points = 10, 500
	repeats := pick(e, 3, 5)
	rep := &report{size: fmt.Sprintf("%s members (%s groups × %d seeds), %d points each, median of %d",
		human(float64(members)), human(float64(members/seeds)), seeds, points, repeats)}

	dataDir, err := e.dir("sweep", false)
	if err != nil {
		return nil, err
	}
	m, err := e.startMaster(masterConf{name: "sweep", dataDir: dataDir})
	if err != nil {
		return nil, err
	}
	defer func() { _ = m.stop() }()
	tok, err := m.login()
	if err != nil {
		return nil, err
	}
	// A grid of members/seeds values of lr, seedCount seeds: the shape of a
	// lab's sweep, at the API's largest size.
	lrs := make([]string, members/seeds)
	for i := range lrs {
		lrs[i] = fmt.Sprintf("%g", 1e-5*float64(i+1))
	}
	body := []byte(fmt.Sprintf(`{"name":"bench","base":{"command":["/bin/true"]},"grid":{"lr":[%s]},"seedCount":%d}`,
		strings.Join(lrs, ","), seeds))
	tgt := newTarget(m.url, "/api/sweeps", tok, body, 1)
	var accepts []time.Duration
	var sweepID string
	for i := 0; i < repeats; i++ {
		m.profile(fmt.Sprintf("sweep-accept-%d", i), true)
		t0 := time.Now()
		ids, err := tgt.post()
		d := time.Since(t0)
		m.profile(fmt.Sprintf("sweep-accept-%d", i), false)
		if err != nil {
			return nil, fmt.Errorf("POST /api/sweeps: %w", err)
		}
		sweepID = ids[0]
		accepts = append(accepts, d)
		e.logf("sweep of %d members accepted in %v", members, d)
	}
	// The reference: the same runs as single submissions, 32 clients.
	one := newTarget(m.url, "/api/train", tok, []byte(`{"name":"bench","command":["/bin/true"],"params":{"lr":0.001,"seed":1}}`), 32)
	one.closedLoop(32, 0, 500*time.Millisecond)
	single := one.closedLoop(32, 0, pick(e, 2*time.Second, 4*time.Second))
	if single.ok == 0 {
		return nil, fmt.Errorf("POST /api/train: no submission succeeded: %s", single.firstErr)
	}
	oneByOne := time.Duration(float64(members) / single.rate() * float64(time.Second))
	e.logf("POST /api/train: %.0f/s, so %d runs take %v one by one", single.rate(), members, oneByOne)
	if err := m.stop(); err != nil {
		return nil, err
	}

	// The last sweep's members end, each with a final reward and a curve.
	t0 := time.Now()
	memberIDs, err := seedSweep(filepath.Join(dataDir, "rlsched.db"), sweepID, points)
	if err != nil {
		return nil, err
	}
	e.logf("%d members ended with %d points each in %v (seeding, not measured)", members, points, time.Since(t0))
	// What the master does after each run's end that had metric points
	// (store.PackingAtEnd, off the end's path): the store's PackSeries of
	// the ended runs, here on all members at once.
	packAtEnd, err := packSeries(filepath.Join(dataDir, "rlsched.db"), memberIDs)
	if err != nil {
		return nil, err
	}
	e.logf("the members' series packed as at their ends: %v", packAtEnd)
	m, err = e.startMaster(masterConf{name: "sweep-stats", dataDir: dataDir})
	if err != nil {
		return nil, err
	}
	metricsPath := "/api/sweeps/" + sweepID + "/metrics?name=episode_reward"
	m.profile("sweep-first", true)
	first, firstSize, err := timedGet(m, metricsPath)
	m.profile("sweep-first", false)
	if err != nil {
		return nil, err
	}
	e.logf("first curves read (the packs made at the members' ends): %v, %s", first, mib(int64(firstSize)))
	// The first read kept its answer too (the master reuses an ended
	// sweep's while its version stays): a new master reads the packs.
	if err := m.stop(); err != nil {
		return nil, err
	}
	if m, err = e.startMaster(masterConf{name: "sweep-packed", dataDir: dataDir}); err != nil {
		return nil, err
	}
	m.profile("sweep-packed", true)
	packed, _, err := timedGet(m, metricsPath)
	m.profile("sweep-packed", false)
	if err != nil {
		return nil, err
	}
	e.logf("curves from the packs, another master: %v", packed)
	// The fallback: members whose ends packed nothing (they ended before
	// this master started, or its packer's queue was full) are read as
	// rows by the first read, which packs them.
	if err := m.stop(); err != nil {
		return nil, err
	}
	if err := dropPacks(filepath.Join(dataDir, "rlsched.db")); err != nil {
		return nil, err
	}
	if m, err = e.startMaster(masterConf{name: "sweep-unpacked", dataDir: dataDir}); err != nil {
		return nil, err
	}
	m.profile("sweep-unpacked", true)
	unpacked, _, err := timedGet(m, metricsPath)
	m.profile("sweep-unpacked", false)
	if err != nil {
		return nil, err
	}
	e.logf("first curves read of unpacked series (rows, packing them): %v", unpacked)
	timed := func(label, path string) (time.Duration, int, error) {
		var ds []time.Duration
		size := 0
		for i := 0; i < repeats; i++ {
			m.profile(fmt.Sprintf("%s-%d", label, i), true)
			d, n, err := timedGet(m, path)
			m.profile(fmt.Sprintf("%s-%d", label, i), false)
			if err != nil {
				return 0, 0, err
			}
			ds, size = append(ds, d), n
		}
		e.logf("%s: median %v, %s", path, medianDur(ds), mib(int64(size)))
		return medianDur(ds), size, nil
	}
	curves, curvesSize, err := timed("sweep-curves", metricsPath)
	if err != nil {
		return nil, err
	}
	groups, groupsSize, err := timed("sweep-groups", "/api/sweeps/"+sweepID+"?runs=false")
	if err != nil {
		return nil, err
	}
	full, fullSize, err := timed("sweep-full", "/api/sweeps/"+sweepID)
	if err != nil {
		return nil, err
	}
	if _, _, err := timedGet(m, "/api/sweeps/"+sweepID+"?format=csv"); err != nil {
		return nil, err
	}
	// Check the answer is what it claims: every group with its seeds.
	var ans struct {
		Groups []struct {
			Series [][4]float64 `json:"series"`
		} `json:"groups"`
	}
	if err := m.get(metricsPath, &ans); err != nil {
		return nil, err
	}
	if len(ans.Groups) != members/seeds || len(ans.Groups[0].Series) != points || ans.Groups[0].Series[0][3] != seeds {
		return nil, fmt.Errorf("the curves answer has %d groups (want %d), its first %d points (want %d)",
			len(ans.Groups), members/seeds, len(ans.Groups[0].Series), points)
	}

	accept := medianDur(accepts)
	t := rep.newTable("Sweeps on SQLite (data on disk, synchronous=FULL)", "what", "median", "answer size")
	t.add(fmt.Sprintf("POST /api/sweeps, %s members in one transaction", human(float64(members))), ms(accept), "")
	t.add(fmt.Sprintf("the same %s runs as POST /api/train, 32 clients (%s/s)", human(float64(members)), human(single.rate())), ms(oneByOne), "")
	t.add(fmt.Sprintf("packing the %s members' series as the master does at each end (PackSeries, off the read's path)", human(float64(members))), ms(packAtEnd), "")
	t.add(fmt.Sprintf("GET …/metrics, first read (%s × %d points from the packs made at the ends; %s mean ± std curves computed)", human(float64(members)), points, human(float64(members/seeds))), ms(first), mib(int64(firstSize)))
	t.add("GET …/metrics, another master's first read of the packed series", ms(packed), mib(int64(curvesSize)))
	t.add(fmt.Sprintf("GET …/metrics, first read of series not packed at the ends (%s × %d points as rows; packs them)", human(float64(members)), points), ms(unpacked), mib(int64(curvesSize)))
	t.add("GET …/metrics, later reads: the answer kept while the sweep's version stays", ms(curves), mib(int64(curvesSize)))
	t.add("GET /api/sweeps/{id}?runs=false: the groups' final rewards", ms(groups), mib(int64(groupsSize)))
	t.add("GET /api/sweeps/{id}: the groups and every member's run", ms(full), mib(int64(fullSize)))
	rep.goal(accept <= time.Second, "a %s-member sweep accepted in ≤ 1 s: %s (one by one through POST /api/train: %s)",
		human(float64(members)), ms(accept), ms(oneByOne))
	rep.goal(first <= time.Second, "the first read of a sweep's group curves over %s runs × %d points in ≤ 1 s: %s (the series packed at the members' ends; %s when none was)",
		human(float64(members)), points, ms(first), ms(unpacked))
	rep.goal(packed <= 200*time.Millisecond && groups <= 200*time.Millisecond,
		"group statistics over %s runs × %d points in ≤ 200 ms: curves %s computed from the packs (%s kept), final rewards %s",
		human(float64(members)), points, ms(packed), ms(curves), ms(groups))
	rep.note("A run's series is packed (one row per run and name) after its end is committed: the master's store.PackingAtEnd queues each ended run that had metric points through it and one goroutine calls the store's PackSeries, off the end's path. The members here are ended by the bench writing the store (5 M points through the real log path would take minutes), so the bench then calls that same PackSeries on them, timed in its own row, and the first read reads the packs as it would after real ends. A member not packed at its end (ended before the master started, its packer's queue full, a late point after its pack) is read as rows by the first read (database/sql costs about 1 µs a row), which packs it: the last first-read row, with every pack dropped. An ended sweep's answer is kept by the master and reused while the store's version of the sweep (members, their last change, packs and points) stays.")
	rep.result = result{metric: "sweep_accept_s", value: accept.Seconds(), unit: "s", ref: "rest_submit_one_by_one", refValue: oneByOne.Seconds()}
	return rep, nil
}

// timedGet GETs path with the bench user's token and returns how long the
// whole answer took and its size.
func timedGet(m *rlMaster, path string) (time.Duration, int, error) {
	tok, err := m.login()
	if err != nil {
		return 0, 0, err
	}
	req, _ := http.NewRequest(http.MethodGet, m.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	d := time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("GET %s: HTTP %d", path, resp.StatusCode)
	}
	return d, int(n), nil
}

// seedSweep ends every member of sweep id (the master stopped) as
// SUCCEEDED with a final reward and points points of episode_reward, in one
// transaction: a learning curve per group, seeds spread around it.
func seedSweep(dbPath, id string, points int) ([]string, error) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", dbPath+"?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=synchronous(OFF)")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT t.id, t.params FROM sweep_members sm JOIN tasks t ON t.id = sm.task_id
		WHERE sm.sweep_id = ? ORDER BY sm.member`, id)
	if err != nil {
		return nil, fmt.Errorf("cannot read the sweep's members: %w", err)
	}
	type member struct {
		id       string
		lr, seed float64
	}
	var ms []member
	for rows.Next() {
		var mb member
		var params string
		if err := rows.Scan(&mb.id, &params); err != nil {
			rows.Close()
			return nil, err
		}
		var p struct{ LR, Seed float64 }
		if err := json.Unmarshal([]byte(params), &p); err != nil {
			rows.Close()
			return nil, fmt.Errorf("member %s: params %s: %w", mb.id, params, err)
		}
		mb.lr, mb.seed = p.LR, p.Seed
		ms = append(ms, mb)
	}
	err = rows.Err()
	rows.Close()
	if err != nil || len(ms) == 0 {
		return nil, fmt.Errorf("sweep %s: %d members: %v", id, len(ms), err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	upd, err := tx.PrepareContext(ctx, `UPDATE tasks SET status = 'SUCCEEDED', final_reward = ?, started_at = created_at,
		finished_at = created_at + 1, updated_at = created_at + 1, exit_code = 0 WHERE id = ?`)
	if err != nil {
		return nil, err
	}
	ins, err := tx.PrepareContext(ctx, `INSERT INTO metrics (task_id, name, step, value) VALUES (?, 'episode_reward', ?, ?)`)
	if err != nil {
		return nil, err
	}
	for i, mb := range ms {
		tid := mb.id
		top := 200 * (1 - math.Exp(-mb.lr*1e4))
		noise := 10 * math.Sin(mb.seed*1.7+float64(i))
		for s := 1; s <= points; s++ {
			v := top*(1-math.Exp(-float64(s)/float64(points)*4)) + noise*math.Sin(float64(s)/17)
			if _, err := ins.ExecContext(ctx, tid, s, v); err != nil {
				return nil, fmt.Errorf("cannot seed the metrics of %s: %w", tid, err)
			}
		}
		if _, err := upd.ExecContext(ctx, top+noise, tid); err != nil {
			return nil, fmt.Errorf("cannot end %s: %w", tid, err)
		}
	}
	ids := make([]string, len(ms))
	for i, mb := range ms {
		ids[i] = mb.id
	}
	return ids, tx.Commit()
}

// packSeries packs the series of the ended runs ids as the master does
// after their ends (store.PackingAtEnd calls the same PackSeries), the
// master stopped, and returns how long that took.
func packSeries(dbPath string, ids []string) (time.Duration, error) {
	st, err := sqlite.Open(dbPath)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	t0 := time.Now()
	// In the master's burst sizes: each wake of its packer takes what waits.
	for len(ids) > 0 {
		part := ids[:min(len(ids), 1000)]
		ids = ids[len(part):]
		if err := st.PackSeries(context.Background(), part); err != nil {
			return 0, err
		}
	}
	return time.Since(t0), nil
}

// dropPacks deletes every packed series (the master stopped): the state of
// runs that ended with nothing packing them.
func dropPacks(dbPath string) error {
	db, err := sql.Open("sqlite", dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec(`DELETE FROM metric_packs`)
	return err
}
