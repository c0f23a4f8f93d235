package e2e

// Fault tests of issue 5 against real processes, a real Redis and a real
// MariaDB. Tests that stop a service use a private instance
// (internal/testkit/testsvc.StartRedis/StartMariaDB); the others share the local
// servers with a database and a key prefix of their own.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testsvc"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// faultSharedBackends returns the env of a master on a database of its own on
// the shared MySQL (dropped when the test ends) and a key prefix of its own
// on the shared Redis.
func faultSharedBackends(t *testing.T) []string {
	t.Helper()
	server := testsvc.RequireMySQL(t)
	redisAddr := testsvc.RequireRedis(t)
	return []string{"MYSQL_DSN=" + tempDatabase(t, server, "e2e_fault_"),
		"REDIS_ADDR=" + redisAddr, "REDIS_PREFIX=e2e-fault-" + rig.RandHex(6)}
}

// tempDatabase creates a database of its own on the MySQL server (a DSN
// without a database name) for one test, drops it at cleanup, and returns
// its DSN.
func tempDatabase(t *testing.T, server, prefix string) string {
	t.Helper()
	name := prefix + rig.RandHex(6)
	db, err := sql.Open("mysql", server)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		db.Close()
		t.Fatalf("cannot create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Logf("cannot drop database %s: %v", name, err)
		}
		db.Close()
	})
	return strings.TrimRight(server, "/") + "/" + name
}

// faultPrivateBackends returns the env of a master on a private MariaDB (which
// the test may stop) and a key prefix of its own on the shared Redis.
func faultPrivateBackends(t *testing.T, mdb *testsvc.MariaDB) []string {
	t.Helper()
	return []string{"MYSQL_DSN=" + mdb.DSN(), "REDIS_ADDR=" + testsvc.RequireRedis(t),
		"REDIS_PREFIX=e2e-fault-" + rig.RandHex(6)}
}

// faultDump logs p's log lines other than request lines when the test
// fails: the harness shows only the tail, which a polling test fills with
// requests.
func faultDump(t *testing.T, p *proc) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var sb strings.Builder
		n := 0
		for _, l := range p.Logs() {
			if l.Msg() == "request" && l.Str("level") == "info" {
				continue
			}
			if n++; n > 300 {
				sb.WriteString("…\n")
				break
			}
			sb.WriteString(l.String() + "\n")
		}
		t.Logf("---- %s log without requests:\n%s", p.Name, sb.String())
	})
}

// faultTasks reads up to 500 runs (optionally of one status); errors are
// returned, not fatal.
func (c *client) faultTasks(status string) ([]task, error) {
	q := url.Values{"limit": {"500"}}
	if status != "" {
		q.Set("status", status)
	}
	r, err := c.Do("GET", "/api/tasks?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	if r.Status != 200 {
		return nil, fmt.Errorf("GET /api/tasks: %s", r)
	}
	var ans struct {
		Items []task `json:"items"`
	}
	return ans.Items, json.Unmarshal(r.Body, &ans)
}

// waitAllStatus waits until every run of ids has status st, or one of
// orEnded; a run ending otherwise fails the test at once.
func (c *client) waitAllStatus(ids []string, st string, timeout time.Duration, orEnded ...string) map[string]task {
	c.T.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	got := map[string]task{}
	testutil.Eventually(c.T, timeout, func() (bool, string) {
		ts, err := c.faultTasks("")
		if err != nil {
			return false, err.Error()
		}
		var pending []string
		for _, tk := range ts {
			if !want[tk.ID] {
				continue
			}
			got[tk.ID] = tk
			if tk.Status != st && !slices.Contains(orEnded, tk.Status) {
				if terminal[tk.Status] {
					c.T.Fatalf("run ended as %v; want %s", tk, st)
				}
				pending = append(pending, tk.String())
			}
		}
		if len(got) < len(want) {
			return false, fmt.Sprintf("only %d of %d runs listed", len(got), len(want))
		}
		return len(pending) == 0, fmt.Sprintf("%d run(s) not %s: %v", len(pending), st, pending)
	})
	return got
}

// faultKillOnceScript prints "start N" and, on attempt 1 only, sleeps until it
// is killed; later attempts end after a second.
const faultKillOnceScript = `import os, time
a = os.environ["RLSCHED_ATTEMPT"]
print("start", a, flush=True)
time.sleep(300 if a == "1" else 1)
print("done", a, flush=True)
`

// TestFaultWorkerKills (issue 5, fault 1): twenty workers are SIGKILLed,
// each while running the first attempt of a run; every run is requeued
// once its lease expires, its second attempt succeeds on another worker,
// and its log holds both attempts. No run is lost.
func TestFaultWorkerKills(t *testing.T) {
	b := newBed(t)
	const runs, pool = 20, 4
	data := filepath.Join(b.Dir, "data")
	m := b.StartMaster("master", rig.MasterOpts{DataDir: data, Env: faultSharedBackends(t)})
	faultDump(t, m.Proc)
	alice, _ := signup(t, m.URL, "alice", "ADMIN")

	// Each slot of the pool is one worker process with one CPU slot, so a
	// kill hits exactly one run; a killed worker is replaced by a new one
	// under a new id, so "elsewhere" is checkable.
	type slot struct {
		p        *proc
		id       string
		idx, gen int
	}
	slots := make([]*slot, pool)
	byID := map[string]*slot{}
	for i := range slots {
		s := &slot{id: fmt.Sprintf("k%d-0", i), idx: i}
		s.p = b.StartWorker("worker-"+s.id, m.RPC, rig.WorkerOpts{ID: s.id, Slots: 1})
		slots[i], byID[s.id] = s, s
	}
	for _, s := range slots {
		m.WaitJoined(t, s.id)
	}

	ids := make([]string, runs)
	traces := map[string]string{}
	for i := range ids {
		id, trace := b.submit(alice, map[string]any{
			"name": fmt.Sprintf("kill-%d", i), "command": []string{"python3", "-c", faultKillOnceScript}, "maxRetries": 2})
		ids[i], traces[id] = id, trace
	}

	start := time.Now()
	firstWorker := map[string]string{}
	killed := 0
	testutil.Eventually(t, 90*time.Second, func() (bool, string) {
		ts, err := alice.faultTasks("RUNNING")
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			s := byID[tk.Worker]
			if tk.Attempt != 1 || s == nil || firstWorker[tk.ID] != "" {
				continue
			}
			// The log must show attempt 1 before the kill.
			if text, err := alice.logText(tk.ID); err != nil || !strings.Contains(text, "start 1\n") {
				continue
			}
			firstWorker[tk.ID] = s.id
			s.p.Kill(t)
			killed++
			delete(byID, s.id)
			s.gen++
			s.id = fmt.Sprintf("k%d-%d", s.idx, s.gen)
			s.p = b.StartWorker("worker-"+s.id, m.RPC, rig.WorkerOpts{ID: s.id, Slots: 1})
			byID[s.id] = s
		}
		return killed >= runs, fmt.Sprintf("only %d of %d kills", killed, runs)
	})
	t.Logf("%d workers killed in %v", killed, time.Since(start).Round(time.Millisecond))

	final := alice.waitAllStatus(ids, "SUCCEEDED", 90*time.Second)
	t.Logf("all %d runs succeeded %v after the first kill", runs, time.Since(start).Round(time.Millisecond))
	for _, id := range ids {
		tk := final[id]
		if tk.Attempt != 2 || tk.Worker == "" || tk.Worker == firstWorker[id] || tk.ExitCode == nil || *tk.ExitCode != 0 {
			t.Errorf("run %v: want attempt 2 on another worker than %s, exit 0", tk, firstWorker[id])
		}
		want := "TRACE_ID:" + traces[id] + "\nstart 1\n=== rlsched attempt 2 ===\nstart 2\ndone 2\n"
		if got := logFile(t, data, id); got != want {
			t.Errorf("log of %s:\n%s\nwant:\n%s", id, got, want)
		}
		if ps := runProcs(id); len(ps) > 0 {
			t.Errorf("run %s still has processes %v after it succeeded", id, ps)
		}
	}
}

// faultCPUSeconds is the CPU time (user+system) pid has used, from /proc.
func faultCPUSeconds(t testing.TB, pid int) float64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("cannot read CPU time of %d: %v", pid, err)
	}
	b := string(raw)
	i := strings.LastIndexByte(b, ')')
	f := strings.Fields(b[i+1:]) // from field 3 (state) on: utime, stime are fields 14, 15
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

// faultLogLines counts p's log lines other than request lines.
func faultLogLines(p *proc) int {
	n := 0
	for _, l := range p.Logs() {
		if l.Msg() != "request" {
			n++
		}
	}
	return n
}

// faultSubmission is one POST /api/train during an outage.
type faultSubmission struct {
	status int
	id     string
	code   string
	err    error
}

// faultSpanScript prints a line and a metric, then 4 s later (inside the
// outage) a second line and metric.
const faultSpanScript = `import time
print("a", flush=True)
print('RLSCHED_METRIC {"step": 1, "m": 1}', flush=True)
time.sleep(4)
print('RLSCHED_METRIC {"step": 2, "m": 2}', flush=True)
print("b", flush=True)
`

// TestFaultMariaDBDown (issue 5, fault 4): the master's MariaDB stops for
// 20 s. Submissions answer 503 with API.md's error body and code
// "unavailable" (none hangs, none is a 500); every acknowledged submission
// exists afterwards; runs submitted before and after complete by
// themselves once MariaDB is back, with every log line and metric point,
// also those of runs that ended during the outage; the master neither
// crashes nor spins.
func TestFaultMariaDBDown(t *testing.T) {
	b := newBed(t)
	mdb := testsvc.StartMariaDB(t)
	data := filepath.Join(b.Dir, "data")
	m := b.StartMaster("master", rig.MasterOpts{DataDir: data, Env: faultPrivateBackends(t, mdb)})
	faultDump(t, m.Proc)
	b.StartWorker("worker-w1", m.RPC, rig.WorkerOpts{ID: "w1", Slots: 4})
	m.WaitJoined(t, "w1")
	alice, _ := signup(t, m.URL, "alice", "ADMIN")

	// Runs that are running when MariaDB stops, and end while it is down.
	spanning := []string{}
	for i := 0; i < 2; i++ {
		id, _ := b.submit(alice, map[string]any{"name": fmt.Sprintf("span-%d", i),
			"command": []string{"python3", "-c", faultSpanScript}})
		spanning = append(spanning, id)
	}
	for _, id := range spanning {
		alice.waitStatus(id, "RUNNING", 30*time.Second)
		alice.waitLogContains(id, "a\n", 15*time.Second)
	}

	// A client submits every 200 ms from before the stop until after the
	// restart, so some submissions race each transition.
	var (
		mu      sync.Mutex
		results []faultSubmission
		down    time.Time // zero until MariaDB is stopped
		restart time.Time // zero until it is being started again
	)
	quit, stopped := make(chan struct{}), make(chan struct{})
	var quitOnce sync.Once
	endSubmitter := func() { quitOnce.Do(func() { close(quit) }); <-stopped }
	t.Cleanup(endSubmitter) // before the test's end, even when it fails early
	go func() {
		defer close(stopped)
		for i := 0; ; i++ {
			sent := time.Now()
			r, err := alice.Do("POST", "/api/train", map[string]any{"name": fmt.Sprintf("sub-%d", i),
				"command": []string{"echo", "sub"}})
			answered := time.Now()
			res := faultSubmission{status: r.Status, err: err}
			if err == nil && (r.Status == 201 || r.Status == 202) {
				var ans struct {
					ID string `json:"id"`
				}
				_ = json.Unmarshal(r.Body, &ans)
				res.id = ans.ID
				b.track(ans.ID)
			} else if err == nil {
				var e errorBody
				if json.Unmarshal(r.Body, &e) == nil && e.Error != nil && e.Error.Message != "" && e.Error.TraceID != "" {
					res.code = e.Error.Code
				}
				if r.Status != 503 || res.code != "unavailable" {
					t.Errorf("submission %d: %s; want 202, or 503 with API.md's error body and code unavailable", i, r)
				}
			}
			mu.Lock()
			// Only a request sent and answered wholly inside the outage
			// must be refused; one racing a transition may go either way.
			inside := !down.IsZero() && sent.After(down) && (restart.IsZero() || answered.Before(restart))
			if err != nil {
				t.Errorf("submission %d: %v; want an answer", i, err)
			} else if inside && res.id != "" {
				t.Errorf("submission %d was acknowledged (%s) while MariaDB was down", i, r)
			}
			results = append(results, res)
			mu.Unlock()
			select {
			case <-quit:
				return
			case <-time.After(200 * time.Millisecond): // the client's pace, not a synchronisation
			}
		}
	}()
	testutil.Eventually(t, 10*time.Second, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(results) >= 3, "the submitter made fewer than 3 submissions"
	})

	mdb.Stop()
	mu.Lock()
	down = time.Now()
	mu.Unlock()
	cpu0 := faultCPUSeconds(t, m.Cmd.Process.Pid)
	lines0 := faultLogLines(m.Proc)
	seen0 := len(m.Proc.Logs())
	healthBad := 0
	// Not a wait: the outage lasts its full 20 s, and the master must answer
	// well all along.
	for time.Since(down) < 20*time.Second {
		// Reads need the store too: the same answer, never a 500.
		if r, err := alice.Do("GET", "/api/tasks?limit=5", nil); err != nil || r.Status >= 500 && r.Status != 503 {
			t.Errorf("GET /api/tasks while MariaDB is down: %v %v; want 200 or 503", r, err)
		}
		if r, err := alice.Do("GET", "/api/monitor/health", nil); err != nil || r.Status != 503 || !strings.Contains(string(r.Body), `"status":"DOWN"`) {
			healthBad++
			if healthBad == 1 {
				t.Errorf("GET /api/monitor/health while MariaDB is down: %v %v; want 503 with status DOWN", r, err)
			}
		}
		if m.Exited() {
			t.Fatalf("master exited while MariaDB was down: %v\n%s", m.Err(), rig.Tail(m.Stderr(), 40))
		}
		time.Sleep(500 * time.Millisecond) // the outage's length, not a synchronisation
	}
	cpu := faultCPUSeconds(t, m.Cmd.Process.Pid) - cpu0
	lines := faultLogLines(m.Proc) - lines0
	byMsg := map[string]int{} // what the master logged meanwhile, for the message below
	for _, l := range m.Proc.Logs()[seen0:] {
		if l.Msg() != "request" {
			byMsg[l.Msg()]++
		}
	}

	mu.Lock()
	restart = time.Now()
	mu.Unlock()
	mdb.Start()
	up := time.Now()
	after, _ := b.submit(alice, map[string]any{"name": "after", "command": []string{"echo", "after"}})
	endSubmitter()
	n503 := 0
	var acked []string
	for _, r := range results {
		if r.status == 503 {
			n503++
		}
		if r.id != "" {
			acked = append(acked, r.id)
		}
	}
	t.Logf("MariaDB down %v: %d submissions, %d answered 503, %d acknowledged; master used %.2f s CPU, logged %d lines besides requests: %v",
		up.Sub(down).Round(time.Millisecond), len(results), n503, len(acked), cpu, lines, byMsg)
	if n503 == 0 {
		t.Errorf("no submission answered 503 while MariaDB was down")
	}
	// Spinning would burn a core (20 s); retrying with backoff costs little.
	if cpu > 4 {
		t.Errorf("master used %.2f s of CPU in 20 s while MariaDB was down: it spins", cpu)
	}
	if lines > 200 {
		t.Errorf("master logged %d lines (requests aside) in 20 s while MariaDB was down: it retries without backoff; by message: %v", lines, byMsg)
	}
	all := append(append(append([]string(nil), spanning...), acked...), after)
	alice.waitAllStatus(all, "SUCCEEDED", 30*time.Second)
	t.Logf("all %d runs succeeded %v after MariaDB came back", len(all), time.Since(up).Round(time.Millisecond))
	for _, id := range spanning {
		want := "a\nRLSCHED_METRIC {\"step\": 1, \"m\": 1}\nRLSCHED_METRIC {\"step\": 2, \"m\": 2}\nb\n"
		if text, err := alice.logText(id); err != nil || !strings.HasSuffix(text, want) {
			t.Errorf("log of %s spanning the outage: %q (%v); want it complete", id, text, err)
		}
		// The metric printed while MariaDB was down is stored once it is back.
		var ms struct {
			Series map[string][][2]float64 `json:"series"`
		}
		alice.Must("GET", "/api/tasks/"+id+"/metrics?names=m", nil, 200, &ms)
		if got := fmt.Sprint(ms.Series["m"]); got != "[[1 1] [2 2]]" {
			t.Errorf("metric m of %s spanning the outage: %s; want [[1 1] [2 2]]", id, got)
		}
	}
}

// faultTickScript prints "start N <unix ns>", then "tick N i" sixteen
// times, 0.5 s apart (8 s, longer than the partition), then "done N <unix ns>".
const faultTickScript = `import os, time
a = os.environ["RLSCHED_ATTEMPT"]
print("start", a, time.time_ns(), flush=True)
for i in range(16):
    print("tick", a, i, flush=True)
    time.sleep(0.5)
print("done", a, time.time_ns(), flush=True)
`

// TestFaultPartitionShort (issue 5, fault 5, short): the connection of a
// worker is cut for less than the lease TTL. The run goes on in the same
// process, is executed once, and its log is complete.
func TestFaultPartitionShort(t *testing.T) {
	b := newBed(t)
	data := filepath.Join(b.Dir, "data")
	const ttl = 12
	m := b.StartMaster("master", rig.MasterOpts{DataDir: data, Env: append(faultSharedBackends(t), "WORKER_TASK_TTL_SECONDS="+strconv.Itoa(ttl))})
	px := newCutProxy(t, m.RPC)
	w1 := b.StartWorker("worker-w1", px.Addr(), rig.WorkerOpts{ID: "w1", Slots: 1})
	m.WaitJoined(t, "w1")
	alice, _ := signup(t, m.URL, "alice", "ADMIN")

	id, traceID := b.submit(alice, map[string]any{"command": []string{"python3", "-c", faultTickScript}})
	alice.waitStatus(id, "RUNNING", 30*time.Second)
	ps := waitRunProcs(t, id, 1, 10*time.Second)
	alice.waitLogContains(id, "tick 1 0\n", 15*time.Second)

	n := px.Cut()
	cut := time.Now()
	if n == 0 {
		t.Fatal("the worker had no connection through the proxy to cut")
	}
	// A third of the lease TTL: the master notices at once (the
	// connection is reset), and the worker's reconnect backoff (100 ms
	// doubling, ±20%) gets it back within about 7.5 s, well before the
	// lease (renewed ≤ 1 s before the cut) expires.
	// Not a wait: the partition lasts its full length (a real process has
	// no clock to advance), and the run's process must survive all of it.
	for time.Since(cut) < ttl*time.Second/3 {
		if rp := runProcs(id); len(rp) == 0 || rp[0].pid != ps[0].pid {
			t.Fatalf("run %s lost its process during a partition shorter than the lease TTL: %v", id, rp)
		}
		time.Sleep(100 * time.Millisecond)
	}
	px.Heal()
	testutil.Eventually(t, 15*time.Second, func() (bool, string) {
		return px.live() > 0, "the worker did not reconnect through the proxy"
	})
	t.Logf("worker reconnected %v after the cut", time.Since(cut).Round(time.Millisecond))

	tk := alice.waitStatus(id, "SUCCEEDED", 30*time.Second)
	if tk.Attempt != 1 || tk.Worker != "w1" {
		t.Errorf("run after a short partition: %v; want attempt 1 on w1", tk)
	}
	file := logFile(t, data, id)
	lines := strings.Split(strings.TrimSuffix(file, "\n"), "\n")
	var want []string
	want = append(want, "TRACE_ID:"+traceID, "start 1")
	for i := 0; i < 16; i++ {
		want = append(want, fmt.Sprintf("tick 1 %d", i))
	}
	want = append(want, "done 1")
	var norm []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 3 && (f[0] == "start" || f[0] == "done") {
			l = f[0] + " " + f[1] // drop the timestamp
		}
		norm = append(norm, l)
	}
	if strings.Join(norm, "\n") != strings.Join(want, "\n") {
		t.Errorf("log after a short partition:\n%s\nwant every line once, in order", file)
	}
	if l, ok := w1.FindLog(func(l logLine) bool { return strings.HasPrefix(l.Msg(), "self-fencing") }); ok {
		t.Errorf("worker self-fenced during a partition shorter than the lease TTL: %v", l)
	}
}

// TestFaultPartitionLong (issue 5, fault 5, long): the connection of a
// worker is cut for longer than the lease TTL. The worker kills its run by
// itself (self-fencing) before it can reconnect; the master requeues the
// run, which runs attempt 2 on another worker only after attempt 1 died.
func TestFaultPartitionLong(t *testing.T) {
	b := newBed(t)
	data := filepath.Join(b.Dir, "data")
	const ttl = 4
	m := b.StartMaster("master", rig.MasterOpts{DataDir: data, Env: append(faultSharedBackends(t), "WORKER_TASK_TTL_SECONDS="+strconv.Itoa(ttl))})
	px := newCutProxy(t, m.RPC)
	w1 := b.StartWorker("worker-w1", px.Addr(), rig.WorkerOpts{ID: "w1", Slots: 1})
	m.WaitJoined(t, "w1")
	alice, _ := signup(t, m.URL, "alice", "ADMIN")

	id, traceID := b.submit(alice, map[string]any{"command": []string{"python3", "-c", faultKillOnceScript}, "maxRetries": 1})
	alice.waitStatus(id, "RUNNING", 30*time.Second)
	pgid := waitRunProcs(t, id, 1, 10*time.Second)[0].pgid
	alice.waitLogContains(id, "start 1\n", 15*time.Second)
	// A second worker, directly connected, to take the requeued run.
	b.StartWorker("worker-w2", m.RPC, rig.WorkerOpts{ID: "w2", Slots: 1})
	m.WaitJoined(t, "w2")

	px.Cut()
	cut := time.Now()
	var gone time.Time
	testutil.Eventually(t, time.Duration(ttl)*time.Second+5*time.Second, func() (bool, string) {
		if groupGone(pgid) {
			gone = time.Now()
			return true, ""
		}
		return false, fmt.Sprintf("attempt 1 (group %d) still runs %v after the cut; the lease TTL is %ds",
			time.Since(cut).Round(time.Millisecond), pgid, ttl)
	})
	t.Logf("attempt 1 killed %v after the cut", gone.Sub(cut).Round(time.Millisecond))
	if gone.Sub(cut) < time.Duration(ttl)*time.Second-1500*time.Millisecond {
		t.Errorf("attempt 1 died %v after the cut, well before the lease TTL (%ds)", gone.Sub(cut), ttl)
	}
	w1.WaitLog(t, 5*time.Second, "self-fencing", func(l logLine) bool { return strings.HasPrefix(l.Msg(), "self-fencing") })

	// Keep the partition until attempt 2 ran: the old worker never got
	// back in time, so only self-fencing could have stopped attempt 1.
	tk := alice.waitStatus(id, "SUCCEEDED", 30*time.Second)
	healed := time.Now()
	px.Heal()
	if tk.Attempt != 2 || tk.Worker != "w2" {
		t.Errorf("run after a long partition: %v; want attempt 2 on w2", tk)
	}
	file := logFile(t, data, id)
	if want := "TRACE_ID:" + traceID + "\nstart 1\n=== rlsched attempt 2 ===\nstart 2\ndone 2\n"; file != want {
		t.Errorf("log after a long partition:\n%s\nwant:\n%s", file, want)
	}
	// Attempt 2 began after attempt 1 was gone: no overlap.
	started := faultAttemptStart(t, alice, id)
	if !started.After(gone.Add(-200 * time.Millisecond)) {
		t.Errorf("attempt 2 started at %v, before attempt 1 died at %v", started, gone)
	}

	// The old worker comes back and must not resurrect anything.
	testutil.Eventually(t, 20*time.Second, func() (bool, string) {
		return px.live() > 0, "w1 did not reconnect after the partition"
	})
	t.Logf("w1 reconnected %v after the heal", time.Since(healed).Round(time.Millisecond))
	if ps := runProcs(id); len(ps) > 0 {
		t.Errorf("run %s has processes %v after w1 reconnected", id, ps)
	}
	final, err := alice.getTask(id)
	if err != nil || final.Status != "SUCCEEDED" || final.Attempt != 2 {
		t.Errorf("run after w1 reconnected: %v (%v); want it still SUCCEEDED as attempt 2", final, err)
	}
}

// faultAttemptStart is when the run's latest attempt began, from startedAt.
func faultAttemptStart(t testing.TB, c *client, id string) time.Time {
	t.Helper()
	r, err := c.Do("GET", "/api/tasks/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ans struct {
		StartedAt time.Time `json:"startedAt"`
	}
	if err := json.Unmarshal(r.Body, &ans); err != nil || ans.StartedAt.IsZero() {
		t.Fatalf("run %s has no startedAt: %s (%v)", id, r, err)
	}
	return ans.StartedAt
}
