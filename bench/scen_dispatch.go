package main

import (
	"flag"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/rlsched/rlsched/bench/fleet"
)

type fleetExec = fleet.Exec

// dispatchRun is one configuration of the dispatch scenario.
type dispatchRun struct {
	name      string
	rates     []float64 // runs/s of each repeat
	cpuPerRun []time.Duration
	hwm       int64
	// The backend's server (MariaDB, Redis): its CPU a run, and MariaDB's
	// counters (mysqlCounters) summed over the repeats, with their runs.
	svcCPUPerRun []time.Duration
	dbCounts     map[string]int64
	dbRuns       int64
	mysql        bool // the MySQL store
	lats         []*latPhase
}

// latPhase is submit-to-start at one fixed submission rate.
type latPhase struct {
	rate     int
	load     *loadResult
	p50, p99 time.Duration
	seen     int
	err      string
}

func (d *dispatchRun) rate() float64 { return median(d.rates) }

// runDispatch measures submit → claim → ExecuteTask → TaskStarted →
// TaskFinished → TaskFinishedAck with 0 s simulated runs.
//
// Throughput: the queue is preloaded straight into the master's SQLite file
// in one transaction (preloadQueue) while the master runs with every
// simulated worker joined; the master's scheduler finds it at its next pass.
// The rate is runs / (last TaskFinishedAck − first ExecuteTask) as the
// workers saw them. Preloading keeps REST out of this figure (REST has no
// batch endpoint, and rest-submit measures it alone).
//
// Latency: POST /api/train at a fixed 1,000 runs/s (open loop), each run's
// submit-to-start = arrival of its ExecuteTask at the worker − the moment its
// POST was sent; both clocks are this machine's wall clock.
// dispatchRuns makes the throughput window long enough to attach a
// counter to the master (perf stat, strace -c): at 16,000 runs/s the
// default 5,000 runs last a third of a second.
var dispatchRuns = flag.Int("dispatch-runs", 0, "dispatch scenario: runs a throughput repeat (default 800 with -quick, else 5,000)")

// dispatchBackends picks the backends beside the embedded one, for an A/B
// of the master alone that does not wait on Redis and MariaDB phases.
var dispatchBackends = flag.String("dispatch-backends", "redis,mysql", "dispatch scenario: the distributed backends to measure besides SQLite (redis, mysql, both comma-separated, or none)")

func runDispatch(e *env) (*report, error) {
	workers, slots := 100, pick(e, 16, 32)
	n := pick(e, 800, 5000)
	if *dispatchRuns > 0 {
		n = *dispatchRuns
	}
	repeats := pick(e, 1, 3)
	latRates, latFor := pick(e, []int{1000}, []int{1000, 100}), pick(e, 1500*time.Millisecond, 10*time.Second)
	places := pick(e, []bool{false}, []bool{false, true})
	rep := &report{size: fmt.Sprintf("%d simulated workers × %d slots; %s runs a repeat, median of %d; latency for %v at each rate",
		workers, slots, human(float64(n)), repeats, latFor)}

	fs, err := fsyncStats(e.tmp, pick(e, 300*time.Millisecond, 2*time.Second))
	if err != nil {
		return nil, err
	}
	fsyncDisk := fs.rate
	e.logf("disk fdatasync: %.0f/s, p50 %v p99 %v", fsyncDisk, fs.p50, fs.p99)
	ech, err := e.loopbackEcho(64, 32, pick(e, 500*time.Millisecond, 3*time.Second))
	if err != nil {
		return nil, err
	}
	e.logf("loopback echo: %.0f round trips/s", ech.rate)

	naiveRun, err := e.dispatchNaive(workers, slots, n, repeats, latRates, latFor)
	if err != nil {
		return nil, fmt.Errorf("naive master: %w", err)
	}
	var runs []*dispatchRun
	for _, tmpfs := range places {
		r, err := e.dispatchRlsched(dispatchBackend{tmpfs: tmpfs}, workers, slots, n, repeats, latRates, latFor)
		if err != nil {
			return nil, fmt.Errorf("rlsched master on %s: %w", placeName(tmpfs), err)
		}
		runs = append(runs, r)
	}
	disk := runs[0]
	// The distributed backends, one at a time beside the embedded ones
	// (SQLite on disk + in-memory leases = disk). In -quick they skip the
	// latency phases to stay under 30 s.
	distLat := pick(e, []int(nil), latRates)
	var dist []*dispatchRun
	var backends []dispatchBackend
	for _, name := range strings.Split(*dispatchBackends, ",") {
		switch strings.TrimSpace(name) {
		case "redis":
			backends = append(backends, dispatchBackend{redis: true})
		case "mysql":
			backends = append(backends, dispatchBackend{mysql: true})
		}
	}
	for _, b := range backends {
		r, err := e.dispatchRlsched(b, workers, slots, n, repeats, distLat, latFor)
		if err != nil {
			rep.note("rlsched master with %s: not measured: %v", b.describe(), err)
			e.logf("rlsched master with %s: %v", b.describe(), err)
			continue
		}
		dist = append(dist, r)
	}

	t := rep.newTable("Throughput (queue preloaded into the store)", "master", "runs/s (median)", "ratio to naive",
		"ratio to embedded (SQLite on disk, memory leases)", "master CPU per run", "backend server CPU per run", "master peak RSS")
	for _, r := range append(append(runs, dist...), naiveRun) {
		svc := "–"
		if len(r.svcCPUPerRun) > 0 {
			svc = ms(medianDur(r.svcCPUPerRun))
		}
		t.add(r.name, human(r.rate()), ratioStr(r.rate(), naiveRun.rate()), ratioStr(r.rate(), disk.rate()), ms(medianDur(r.cpuPerRun)), svc, mib(r.hwm))
	}
	lt := rep.newTable("Submit-to-start latency (POST, open loop at a fixed rate; ExecuteTask arrival at the worker)",
		"master", "offered runs/s", "accepted runs/s", "p50", "p99", "started / accepted")
	all := append(append(append([]*dispatchRun(nil), runs...), dist...), naiveRun)
	for _, r := range all {
		for _, l := range r.lats {
			lt.add(r.name, human(float64(l.rate)), human(l.load.rate()), ms(l.p50), ms(l.p99), fmt.Sprintf("%d / %d", l.seen, l.load.ok))
		}
	}
	ref := rep.newTable("References measured in the same run", "reference", "value")
	ref.add("loopback TCP ping-pong, 64 connections, 32 B (gnet echo server)", fmt.Sprintf("%s round trips/s (p50 %s, p99 %s, server CPU %s a message)",
		human(ech.rate), ms(ech.p50), ms(ech.p99), ms(ech.cpuPerMsg)))
	ref.add("4 KiB write + fdatasync on the data disk (≈ one SQLite WAL commit; noisy: the disk is shared)",
		fmt.Sprintf("%s /s (p50 %s, p99 %s)", human(fsyncDisk), ms(fs.p50), ms(fs.p99)))
	ref.add("naive master dispatch (same protocol, in-memory queue)", human(naiveRun.rate())+" runs/s")

	tmpfsRate := "not measured in -quick"
	if len(runs) > 1 {
		tmpfsRate = human(runs[1].rate())
	}
	diskCPU := medianDur(disk.cpuPerRun)
	rep.goal(disk.rate() >= 50000, "≥ 50,000 runs/s: %s runs/s with data on disk, %s on tmpfs; the master's CPU a run %s against the 20 µs that 50,000 runs/s on one core allows (at that CPU the %d cores allow at most %s runs/s, the simulated workers beside); the naive in-memory master reaches %s and raw loopback ping-pong %s round trips/s on this machine",
		human(disk.rate()), tmpfsRate, ms(diskCPU), runtime.NumCPU(), human(float64(runtime.NumCPU())/max(diskCPU, 1).Seconds()), human(naiveRun.rate()), human(ech.rate))
	l := disk.lats[0]
	rep.goal(l.p99 <= 5*time.Millisecond && l.seen == int(l.load.ok) && l.load.ok > 0 && l.load.skipped == 0,
		"p99 submit-to-start ≤ 5 ms at 1,000 runs/s: p99 %s with data on disk (%s runs/s accepted, %d of %d started)",
		ms(l.p99), human(l.load.rate()), l.seen, l.load.ok)
	for _, r := range dist {
		if !r.mysql {
			continue
		}
		rep.goal(r.rate() >= 10000, "MySQL ≥ 10,000 runs/s: %s runs/s (%s)", human(r.rate()), r.name)
		if len(r.lats) > 0 {
			l := r.lats[0]
			rep.goal(l.p99 <= 50*time.Millisecond && l.seen == int(l.load.ok) && l.load.ok > 0 && l.load.skipped == 0,
				"MySQL p99 submit-to-start ≤ 50 ms at %s runs/s: p99 %s (%s runs/s accepted, %d of %d started)",
				human(float64(l.rate)), ms(l.p99), human(l.load.rate()), l.seen, l.load.ok)
		}
	}
	rep.note("Each run is two or three fenced row writes in the master (QUEUED→DISPATCHED, →RUNNING unless the run's end arrives while that write still waits and supersedes it, →SUCCEEDED with the owner's usage charge in the same transaction), group-committed with synchronous=FULL through the store's single writer connection (store.Batcher: the writes of many runs share one transaction and one fdatasync; the disk sustains %s fdatasync/s in this run, one taking %s at p50 and %s at p99). What bounds throughput is the master's CPU a run (the column above; ≈ 15 µs of SQLite B-tree work per row written, the protocol and the Go runtime make the rest), against the 20 µs a run that 50,000 runs/s on one core allows (docs/decisions.md, issue 19). Submit-to-start is two such commits in series, the create and then the dispatch, each possibly behind one already committing on the single writer. A p99 of ≈ 10 ms at any rate, on tmpfs too, used to come before the REST server had even started the request (timestamps at the submitter's send and at fasthttp's request time): gnet's acceptor and event loops wait in epoll_wait holding their Ps, and a request ready in the runtime's netpoller waited for sysmon to take one back. The master now has a P for each poller beside its CPUs (dispatch/procs.go; docs/decisions.md, issue 19).",
		human(fsyncDisk), ms(fs.p50), ms(fs.p99))
	for _, r := range all {
		for _, l := range r.lats {
			if l.err != "" {
				rep.note("%s at %d runs/s: %s", r.name, l.rate, l.err)
			}
		}
	}
	for _, r := range dist {
		rep.note("%s: %s runs/s = %.2f× the embedded backends (SQLite on disk, memory leases) measured in the same run.", r.name, human(r.rate()), r.rate()/disk.rate())
		if r.dbRuns > 0 {
			per := func(k string) float64 { return float64(r.dbCounts[k]) / float64(r.dbRuns) }
			rep.note("%s, what a run costs MariaDB (SHOW GLOBAL STATUS and the server's CPU, from the end of the preload to the last run's end): %.2f statements, %.3f commits (one for every %.0f runs: the group commits of store.Batcher) and %.3f redo-log writes (innodb_flush_log_at_trx_commit=1: a commit returns once its redo is on disk), and %s of MariaDB's CPU a run beside the master's %s. The %d cores of this machine run both: at that CPU a run they allow at most %s runs/s with nothing else running.",
				r.name, per("Questions"), per("Com_commit"), 1/per("Com_commit"), per("Innodb_log_writes"), ms(medianDur(r.svcCPUPerRun)), ms(medianDur(r.cpuPerRun)),
				runtime.NumCPU(), human(float64(runtime.NumCPU())/(medianDur(r.svcCPUPerRun)+medianDur(r.cpuPerRun)).Seconds()))
		}
	}
	rep.result = result{metric: "runs_per_s", value: disk.rate(), unit: "runs/s", ref: "naive_master", refValue: naiveRun.rate()}
	return rep, nil
}

func (e *env) dispatchRlsched(b dispatchBackend, workers, slots, n, repeats int, latRates []int, latFor time.Duration) (*dispatchRun, error) {
	onTmpfs := b.tmpfs
	dataDir, err := e.dir("dispatch", onTmpfs)
	if err != nil {
		return nil, err
	}
	env, undo, err := b.prepare()
	if err != nil {
		return nil, err
	}
	defer undo()
	var m *rlMaster
	err = withEnv(env, func() error {
		m, err = e.startMaster(masterConf{name: "dispatch", dataDir: dataDir})
		return err
	})
	if err != nil {
		return nil, err
	}
	defer m.stop()
	tok, err := m.login()
	if err != nil {
		return nil, err
	}
	g, err := e.startFleet(m.rpc, benchJoinToken, fleetOpts{N: workers, Prefix: "dw", Slots: slots, RecordExec: true})
	if err != nil {
		return nil, err
	}
	defer g.stop()
	if j, err := g.connect("", 60*time.Second); err != nil || j < int64(workers) {
		return nil, fmt.Errorf("only %d of %d workers joined: %v", j, workers, err)
	}
	r := &dispatchRun{name: "rlsched, data on " + placeName(onTmpfs), mysql: b.mysql}
	db := filepath.Join(dataDir, "rlsched.db")
	label := "dispatch-" + map[bool]string{false: "disk", true: "tmpfs"}[onTmpfs]
	preload := func() error { return preloadQueue(db, n, []string{"/bin/true"}) }
	switch {
	case b.redis:
		r.name, label = "rlsched, "+b.describe(), "dispatch-redis"
	case b.mysql:
		r.name, label = "rlsched, "+b.describe(), "dispatch-mysql"
		preload = func() error { return preloadQueueMySQL(b.dsn, n, []string{"/bin/true"}) }
	}
	svcPid := 0
	if b.service() != "" {
		svcPid = pidOf(b.service())
	}
	for i := 0; i < repeats; i++ {
		if err := g.reset(); err != nil {
			return nil, err
		}
		m.profile(fmt.Sprintf("%s-throughput-%d", label, i), true)
		s0 := sample(m.pid())
		if err := preload(); err != nil {
			return nil, err
		}
		// The server's share is counted from the end of the preload, which
		// is not the runs' work (the master has barely begun by then).
		var v0 procSample
		if svcPid > 0 {
			v0 = sample(svcPid)
		}
		var c0 map[string]int64
		if b.mysql {
			c0, _ = mysqlStatus()
		}
		st, err := g.waitFinished(int64(n), time.Duration(max(120, n/50))*time.Second)
		if err != nil {
			return nil, err
		}
		s1 := sample(m.pid())
		if svcPid > 0 {
			r.svcCPUPerRun = append(r.svcCPUPerRun, v0.cpuTo(sample(svcPid))/time.Duration(n))
		}
		if c0 != nil {
			if c1, err := mysqlStatus(); err == nil {
				if r.dbCounts == nil {
					r.dbCounts = map[string]int64{}
				}
				for _, k := range mysqlCounters {
					r.dbCounts[k] += c1[k] - c0[k]
				}
				r.dbRuns += int64(n)
			}
		}
		m.profile(fmt.Sprintf("%s-throughput-%d", label, i), false)
		span := time.Duration(st.LastFinishNs - st.FirstExecNs)
		r.rates = append(r.rates, float64(n)/span.Seconds())
		r.cpuPerRun = append(r.cpuPerRun, s0.cpuTo(s1)/time.Duration(n))
		e.logf("%s: %d runs in %v: %.0f runs/s, master CPU %v", r.name, n, span.Round(time.Millisecond), r.rates[i], s0.cpuTo(s1))
	}
	// Latency at fixed rates through REST.
	tgt := newTarget(m.url, "/api/train", tok, []byte(`{"name":"bench","command":["/bin/true"]}`), 512)
	for _, rate := range latRates {
		if err := g.reset(); err != nil {
			return nil, err
		}
		label := fmt.Sprintf("%s-latency-%d", label, rate)
		m.profile(label, true)
		l := &latPhase{rate: rate, load: tgt.openLoop(rate, latFor, 512)}
		if _, err := g.waitFinished(l.load.ok, 120*time.Second); err != nil {
			l.err = err.Error()
		}
		m.profile(label, false)
		if err := e.finishLatency(r.name, l, g); err != nil {
			return nil, err
		}
		r.lats = append(r.lats, l)
	}
	_, r.hwm = m.mem()
	return r, nil
}

func (e *env) finishLatency(name string, l *latPhase, g *fleetGroup) error {
	execs, err := g.execs()
	if err != nil {
		return err
	}
	h, seen := latencies(l.load.sent, execs)
	l.p50, l.p99, l.seen = h.QuantileDuration(0.5), h.QuantileDuration(0.99), seen
	if l.load.errs > 0 || l.load.skipped > 0 {
		l.err += fmt.Sprintf(" %d submissions failed, %d not sent because 512 were already waiting for an answer (the submitter could not keep the rate) %s",
			l.load.errs, l.load.skipped, l.load.firstErr)
	}
	e.logf("%s: %d accepted at %.0f/s (offered %d/s), %d started, submit-to-start p50 %v p99 %v", name, l.load.ok,
		l.load.rate(), l.rate, seen, l.p50, l.p99)
	return nil
}

func (e *env) dispatchNaive(workers, slots, n, repeats int, latRates []int, latFor time.Duration) (*dispatchRun, error) {
	rpcPort, err := freePort()
	if err != nil {
		return nil, err
	}
	httpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	c, err := e.startChild("naive", naiveConfig{RPC: fmt.Sprintf("127.0.0.1:%d", rpcPort),
		HTTP: fmt.Sprintf("127.0.0.1:%d", httpPort), Token: benchJoinToken, Interval: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	defer c.stop()
	g, err := e.startFleet(fmt.Sprintf("127.0.0.1:%d", rpcPort), benchJoinToken, fleetOpts{N: workers, Prefix: "dw", Slots: slots, RecordExec: true})
	if err != nil {
		return nil, err
	}
	defer g.stop()
	if j, err := g.connect("", 60*time.Second); err != nil || j < int64(workers) {
		return nil, fmt.Errorf("only %d of %d workers joined: %v", j, workers, err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	r := &dispatchRun{name: "naive master (goroutine per connection, in memory)"}
	for i := 0; i < repeats; i++ {
		if err := g.reset(); err != nil {
			return nil, err
		}
		s0 := sample(c.pid())
		if _, err := newTarget(base, fmt.Sprintf("/submit?n=%d", n), "", nil, 1).post(); err != nil {
			return nil, err
		}
		st, err := g.waitFinished(int64(n), 120*time.Second)
		if err != nil {
			return nil, err
		}
		s1 := sample(c.pid())
		span := time.Duration(st.LastFinishNs - st.FirstExecNs)
		r.rates = append(r.rates, float64(n)/span.Seconds())
		r.cpuPerRun = append(r.cpuPerRun, s0.cpuTo(s1)/time.Duration(n))
		e.logf("%s: %d runs in %v: %.0f runs/s", r.name, n, span.Round(time.Millisecond), r.rates[i])
	}
	tgt := newTarget(base, "/submit", "", nil, 512)
	for _, rate := range latRates {
		if err := g.reset(); err != nil {
			return nil, err
		}
		l := &latPhase{rate: rate, load: tgt.openLoop(rate, latFor, 512)}
		if _, err := g.waitFinished(l.load.ok, 60*time.Second); err != nil {
			l.err = err.Error()
		}
		if err := e.finishLatency(r.name, l, g); err != nil {
			return nil, err
		}
		r.lats = append(r.lats, l)
	}
	_, r.hwm, _ = procMem(c.pid())
	return r, nil
}
