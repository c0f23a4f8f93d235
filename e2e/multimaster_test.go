package e2e

// Several masters on one MySQL and one Redis (issue 5): events, cancels,
// logs and the worker list work through any master, and the runs survive
// losing one master. Each test has a database and a Redis key prefix of its
// own (and, when it restarts Redis, a Redis of its own).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	_ "github.com/go-sql-driver/mysql"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testsvc"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// mmBackends returns the env of masters sharing a database of their own on
// the shared MySQL (dropped at the end), the Redis at redisAddr (the shared
// one when empty) under a prefix of their own, and one LOG_DIR.
func mmBackends(t *testing.T, b *bed, redisAddr string) []string {
	t.Helper()
	server := testsvc.RequireMySQL(t)
	if redisAddr == "" {
		redisAddr = testsvc.RequireRedis(t)
	}
	return []string{"MYSQL_DSN=" + tempDatabase(t, server, "e2e_multi_"),
		"REDIS_ADDR=" + redisAddr, "REDIS_PREFIX=e2e-multi-" + rig.RandHex(6),
		"LOG_DIR=" + filepath.Join(b.Dir, "shared-logs")}
}

// mmStartMasters starts n masters on env, each with a data dir of its own.
func (b *bed) mmStartMasters(n int, env []string) []*master {
	b.T.Helper()
	var ms []*master
	for i := range n {
		name := fmt.Sprintf("master-%c", 'a'+i)
		ms = append(ms, b.StartMaster(name, rig.MasterOpts{DataDir: filepath.Join(b.Dir, name), Env: env}))
	}
	return ms
}

// mmRPCList is the --master list of a worker that prefers ms[first].
func mmRPCList(ms []*master, first int) string {
	var l []string
	for i := range ms {
		l = append(l, ms[(first+i)%len(ms)].RPC)
	}
	return strings.Join(l, ",")
}

// mmEvents follows /topic/tasks and /topic/workers on one master and keeps
// the statuses each run was seen in.
type mmEvents struct {
	conn *websocket.Conn
	mu   sync.Mutex
	seen map[string][]string // run → statuses in order
	wkrs map[string]string   // worker → last state
	done chan struct{}
}

func mmWatchEvents(t *testing.T, base, token string) *mmEvents {
	t.Helper()
	u, _ := url.Parse(base)
	u.Scheme, u.Path, u.RawQuery = "ws", "/ws", "token="+url.QueryEscape(token)
	c, _, err := websocket.DefaultDialer.Dial(u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &mmEvents{conn: c, seen: map[string][]string{}, wkrs: map[string]string{}, done: make(chan struct{})}
	for _, topic := range []string{"/topic/tasks", "/topic/workers"} {
		if err := c.WriteJSON(map[string]any{"op": "subscribe", "topic": topic}); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		defer close(w.done)
		for {
			_, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			var f struct {
				Type string `json:"type"`
				Data struct {
					ID     string `json:"id"`
					Status string `json:"status"`
					State  string `json:"state"`
				} `json:"data"`
			}
			if json.Unmarshal(msg, &f) != nil {
				continue
			}
			w.mu.Lock()
			switch f.Type {
			case "task":
				w.seen[f.Data.ID] = append(w.seen[f.Data.ID], f.Data.Status)
			case "worker":
				w.wkrs[f.Data.ID] = f.Data.State
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.Close(); <-w.done })
	return w
}

// waitSeen waits until the client saw run id in status st.
func (w *mmEvents) waitSeen(t *testing.T, id, st string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, s := range w.seen[id] {
			if s == st {
				return true, ""
			}
		}
		return false, fmt.Sprintf("run %s seen as %v, want %s", id, w.seen[id], st)
	})
}

// mmWorkerList is GET /api/workers: id → (state, master).
func mmWorkerList(c *client) (map[string][2]string, error) {
	r, err := c.Do("GET", "/api/workers", nil)
	if err != nil {
		return nil, err
	}
	if r.Status != 200 {
		return nil, fmt.Errorf("GET /api/workers: %s", r)
	}
	var ws []struct {
		ID     string `json:"id"`
		State  string `json:"state"`
		Master string `json:"master"`
	}
	if err := json.Unmarshal(r.Body, &ws); err != nil {
		var wrapped struct {
			Items []struct {
				ID     string `json:"id"`
				State  string `json:"state"`
				Master string `json:"master"`
			} `json:"items"`
		}
		if err2 := json.Unmarshal(r.Body, &wrapped); err2 != nil {
			return nil, fmt.Errorf("GET /api/workers: %v in %s", err, r)
		}
		ws = wrapped.Items
	}
	out := map[string][2]string{}
	for _, w := range ws {
		out[w.ID] = [2]string{w.State, w.Master}
	}
	return out, nil
}

// mmTickScript prints a numbered line every 0.2 s for ten minutes.
const mmTickScript = `import time
for i in range(3000):
    print("tick", i, flush=True)
    time.sleep(0.2)
`

// TestMultiMasterBasics: two masters, two workers (one on each). A run's
// events reach WebSocket clients on both masters; /api/workers of each
// lists both workers connected; logs are readable and live-tailable through
// the master that does not write them; a cancel sent to the master that
// does not hold the run's worker stops the run.
func TestMultiMasterBasics(t *testing.T) {
	b := newBed(t)
	env := mmBackends(t, b, "")
	ms := b.mmStartMasters(2, env)
	b.StartWorker("worker-w1", mmRPCList(ms, 0), rig.WorkerOpts{ID: "w1", Slots: 1})
	b.StartWorker("worker-w2", mmRPCList(ms, 1), rig.WorkerOpts{ID: "w2", Slots: 1})
	ms[0].WaitJoined(t, "w1")
	ms[1].WaitJoined(t, "w2")
	holder := map[string]int{"w1": 0, "w2": 1}

	alice, _ := signup(t, ms[0].URL, "alice", "ADMIN")
	onB := newClient(t, ms[1].URL).login("alice") // one user table, one JWT secret
	clients := []*client{alice, onB}
	evs := []*mmEvents{mmWatchEvents(t, ms[0].URL, alice.Token), mmWatchEvents(t, ms[1].URL, onB.Token)}

	// One slot per worker: two runs take both workers, so each master holds
	// one of them and each client sees one run through the other master.
	r1, _ := b.submit(alice, map[string]any{"command": []string{"python3", "-u", "-c", mmTickScript}})
	r2, _ := b.submit(alice, map[string]any{"command": []string{"python3", "-u", "-c", mmTickScript}})
	runs := map[string]string{} // run → worker
	for _, id := range []string{r1, r2} {
		tk := alice.waitStatus(id, "RUNNING", 30*time.Second)
		runs[id] = tk.Worker
		for i, ev := range evs {
			ev.waitSeen(t, id, "RUNNING", 10*time.Second)
			_ = i
		}
	}
	if runs[r1] == runs[r2] {
		t.Fatalf("both runs on %s with one slot each", runs[r1])
	}

	// Every master lists both workers, connected, each on its own master.
	for i, c := range clients {
		testutil.Eventually(t, 15*time.Second, func() (bool, string) {
			ws, err := mmWorkerList(c)
			if err != nil {
				return false, err.Error()
			}
			for w, m := range holder {
				got := ws[w]
				if got[0] != "RUNNING" {
					return false, fmt.Sprintf("master %d lists %s as %v: %v", i, w, got, ws)
				}
				_ = m
			}
			return true, ""
		})
	}

	// Logs through either master, and a live tail through the other one.
	for id, w := range runs {
		other := clients[1-holder[w]]
		other.waitLogContains(id, "tick 3\n", 20*time.Second)
		tail := &wsTail{t: t}
		if err := tail.connect(other.Base, other.Token, id); err != nil {
			t.Fatal(err)
		}
		text, _ := other.logText(id)
		// More than the file held when we subscribed: live bytes came.
		if err := tail.read(len(text)+40, other, id); err != nil {
			t.Fatalf("live tail of %s through the other master: %v (got %d bytes)", id, err, len(tail.got))
		}
		tail.conn.Close()
		whole, _ := other.logText(id)
		if !strings.HasPrefix(whole, string(tail.got)) {
			t.Fatalf("tail of %s differs from the file: %q vs %q", id, tail.got, whole)
		}
	}

	// Cancel each run through the master that does not hold its worker.
	for id, w := range runs {
		procs := waitRunProcs(t, id, 1, 10*time.Second)
		clients[1-holder[w]].Must("POST", "/api/tasks/"+id+"/cancel", nil, 202, nil)
		testutil.Eventually(t, time.Duration(cancelGraceSeconds+5)*time.Second, func() (bool, string) {
			return groupGone(procs[0].pgid), fmt.Sprintf("run %s still running after a cancel through the other master", id)
		})
		alice.waitStatus(id, "CANCELLED", 15*time.Second)
		for _, ev := range evs {
			ev.waitSeen(t, id, "CANCELLED", 10*time.Second)
		}
	}
}

// mmOutScript prints mmOutLines lines naming its run, 0.1 s apart: 12 s,
// so that on a loaded machine most of the 50 runs still run when the
// last of them starts.
const mmOutScript = `import os, time
tid = os.environ["RLSCHED_TASK_ID"]
for i in range(120):
    print("%s line %d %s" % (tid, i, "x" * 40), flush=True)
    time.sleep(0.1)
`

func mmOutWant(traceID, id string) []byte {
	var b bytes.Buffer
	b.WriteString("TRACE_ID:" + traceID + "\n")
	for i := range 120 { // mmOutScript's
		fmt.Fprintf(&b, "%s line %d %s\n", id, i, strings.Repeat("x", 40))
	}
	return b.Bytes()
}

// TestMultiMasterKillOne: SIGKILL one of two masters while 50 runs are
// running: the workers move to the other master, every run ends SUCCEEDED
// in its first attempt, and every log is complete, byte for byte.
func TestMultiMasterKillOne(t *testing.T) {
	b := newBed(t)
	env := mmBackends(t, b, "")
	ms := b.mmStartMasters(2, env)
	for i := range 3 {
		id := fmt.Sprintf("w%d", i+1)
		b.StartWorker("worker-"+id, mmRPCList(ms, i%2), rig.WorkerOpts{ID: id, Slots: 20})
	}
	ms[0].WaitJoined(t, "w1")
	ms[0].WaitJoined(t, "w3")
	ms[1].WaitJoined(t, "w2")
	alice, _ := signup(t, ms[0].URL, "alice", "ADMIN")
	onB := newClient(t, ms[1].URL).login("alice")

	traces := map[string]string{}
	var ids []string
	for range 50 {
		id, tr := b.submit(alice, map[string]any{"command": []string{"python3", "-u", "-c", mmOutScript}})
		traces[id] = tr
		ids = append(ids, id)
	}
	// Every run started: RUNNING, or already SUCCEEDED when starting all
	// 50 took a loaded machine longer than a run lasts.
	running := alice.waitAllStatus(ids, "RUNNING", 60*time.Second, "SUCCEEDED")
	// A live tail on b of a run that a writes, across a's death.
	var followed string
	for _, id := range ids {
		if w := running[id].Worker; (w == "w1" || w == "w3") && running[id].Status == "RUNNING" {
			followed = id
			break
		}
	}
	if followed == "" {
		t.Fatal("no run on the workers of master a")
	}
	live := &wsTail{t: t}
	if err := live.connect(onB.Base, onB.Token, followed); err != nil {
		t.Fatal(err)
	}
	defer live.conn.Close()
	if err := live.read(len("TRACE_ID:")+200, onB, followed); err != nil {
		t.Fatalf("live tail on b before the kill: %v", err)
	}
	ms[0].Kill(t)
	// The workers of the dead master re-adopt their runs on the other one.
	for _, w := range []string{"w1", "w3"} {
		l := ms[1].WaitJoined(t, w)
		t.Logf("%s moved: %v", w, l)
	}
	final := onB.waitAllStatus(ids, "SUCCEEDED", 120*time.Second)
	want := mmOutWant(traces[followed], followed)
	if err := live.read(len(want), onB, followed); err != nil {
		t.Fatalf("live tail on b after the kill: %v (%d of %d bytes)", err, len(live.got), len(want))
	}
	if !bytes.Equal(live.got, want) {
		t.Errorf("live tail of %s on b: %d bytes, want %d; first difference at %d", followed, len(live.got), len(want), firstDiff(live.got, want))
	}
	for _, id := range ids {
		if tk := final[id]; tk.Attempt != 1 {
			t.Errorf("run %v: want attempt 1 (never rerun)", tk)
		}
		want := mmOutWant(traces[id], id)
		got, err := os.ReadFile(filepath.Join(b.Dir, "shared-logs", id+".log"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("log of %s: %d bytes, want %d; first difference at %d:\n%s", id, len(got), len(want),
				firstDiff(got, want), rig.Tail(string(got), 5))
		}
		text, err := onB.logText(id)
		if err != nil || text != string(want) {
			t.Errorf("log of %s through the surviving master: %d bytes, %v", id, len(text), err)
		}
	}
}

// mmSpanScript notes its start and stop (run, attempt, unix ns) in the file
// named by its argument, printing a line every 0.1 s for 8 s between.
const mmSpanScript = `import os, sys, time
tid, a = os.environ["RLSCHED_TASK_ID"], os.environ["RLSCHED_ATTEMPT"]
def note(what):
    with open(sys.argv[1], "a") as f:
        f.write("%s %s %s %d\n" % (what, tid, a, time.time_ns()))
note("start")
for i in range(80):
    print(i, flush=True)
    time.sleep(0.1)
note("stop")
`

// mmCheckSpans verifies that each run of ids executed exactly once: one start
// and one stop line, in that order, and nothing of any other run id.
func mmCheckSpans(t *testing.T, path string, ids []string) {
	t.Helper()
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type span struct{ starts, stops []string }
	spans := map[string]*span{}
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("bad span line %q", line)
		}
		s := spans[f[1]]
		if s == nil {
			s = &span{}
			spans[f[1]] = s
		}
		if f[0] == "start" {
			s.starts = append(s.starts, f[3])
		} else {
			s.stops = append(s.stops, f[3])
		}
	}
	for _, id := range ids {
		s := spans[id]
		if s == nil || len(s.starts) != 1 || len(s.stops) != 1 || len(s.starts[0]) != len(s.stops[0]) || s.starts[0] > s.stops[0] {
			t.Errorf("run %s executed as %+v; want one start, then one stop", id, s)
		}
	}
}

// rebuilds counts the times a master logged that it rebuilt the lease
// state (the log's times have whole seconds only: counting is exact).
func rebuilds(m *master) int {
	n := 0
	for _, l := range m.Logs() {
		if l.Msg() == "lease state rebuilt" {
			n++
		}
	}
	return n
}

// mmWaitRebuilt waits until one of ms logged more rebuilds than before
// (a master with nothing to claim or renew has no reason to); it returns
// which one and the time since at when it saw it (an upper bound, by 50 ms
// polls).
func mmWaitRebuilt(t *testing.T, ms []*master, before []int, at time.Time, timeout time.Duration) (string, time.Duration) {
	t.Helper()
	var who string
	testutil.Eventually(t, timeout, func() (bool, string) {
		for i, m := range ms {
			if rebuilds(m) > before[i] {
				who = m.Name
				return true, ""
			}
		}
		return false, "no master has rebuilt the lease state"
	})
	return who, time.Since(at)
}

// TestMultiMasterRedisFlush (issue 5, fault 3): Redis is restarted empty,
// then flushed, while runs are running on two masters. A master notices
// (the lease scripts find the ready mark gone) at its next heartbeat or
// claim, rebuilds the fencing counter and the leases of every active run
// from the store within two heartbeat intervals, and work goes on: every run ends SUCCEEDED in its first attempt, no run executes
// twice (the runs note their start and stop), and new runs are placed.
func TestMultiMasterRedisFlush(t *testing.T) {
	b := newBed(t)
	r := testsvc.StartRedis(t) // its own: restarting the shared one would hit other tests
	env := mmBackends(t, b, r.Addr())
	ms := b.mmStartMasters(2, env)
	// w1 (on master a) cannot take all of the first 8 runs: both masters
	// hold runs when Redis loses its state.
	b.StartWorker("worker-w1", mmRPCList(ms, 0), rig.WorkerOpts{ID: "w1", Slots: 5})
	b.StartWorker("worker-w2", mmRPCList(ms, 1), rig.WorkerOpts{ID: "w2", Slots: 15})
	ms[0].WaitJoined(t, "w1")
	ms[1].WaitJoined(t, "w2")
	alice, _ := signup(t, ms[0].URL, "alice", "ADMIN")
	spans := filepath.Join(b.Dir, "spans.txt")
	// The runs (under uids of their own when the worker is root) append to
	// it: it must exist and be writable by every uid.
	if err := os.WriteFile(spans, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(spans, 0o666); err != nil {
		t.Fatal(err)
	}
	submit := func(n int) []string {
		var ids []string
		for range n {
			id, _ := b.submit(alice, map[string]any{"command": []string{"python3", "-u", "-c", mmSpanScript, spans}})
			ids = append(ids, id)
		}
		return ids
	}
	hb := time.Duration(hbTTLSeconds) * time.Second / 3

	ids := submit(8)
	alice.waitAllStatus(ids, "RUNNING", 60*time.Second)
	before := []int{rebuilds(ms[0]), rebuilds(ms[1])}
	at := time.Now()
	r.Kill()
	r.Start()
	who, took := mmWaitRebuilt(t, ms, before, at, 20*time.Second)
	t.Logf("%s rebuilt the lease state %v after Redis restarted empty", who, took.Round(time.Millisecond))
	if took > 2*hb+time.Second { // two heartbeats, and the restart itself
		t.Errorf("%s rebuilt %v after the restart; want within two heartbeat intervals (%v)", who, took, 2*hb)
	}
	more := submit(8)
	alice.waitAllStatus(more, "RUNNING", 30*time.Second)

	before = []int{rebuilds(ms[0]), rebuilds(ms[1])}
	at = time.Now()
	r.Flush()
	who, took = mmWaitRebuilt(t, ms, before, at, 20*time.Second)
	t.Logf("%s rebuilt the lease state %v after FLUSHALL", who, took.Round(time.Millisecond))
	if took > 2*hb {
		t.Errorf("%s rebuilt %v after FLUSHALL; want within two heartbeat intervals (%v)", who, took, 2*hb)
	}
	last := submit(4)
	all := append(append(ids, more...), last...)
	final := alice.waitAllStatus(all, "SUCCEEDED", 120*time.Second)
	for _, id := range all {
		if tk := final[id]; tk.Attempt != 1 {
			t.Errorf("run %v: want attempt 1", tk)
		}
	}
	mmCheckSpans(t, spans, all)
}

// TestMultiMasterCancelWhileMoving: the master holding a run's worker is
// SIGKILLed and the run is cancelled through the other master before the
// worker reached it: the request is in the store, so the master the worker
// moves to stops the run when it re-adopts it.
func TestMultiMasterCancelWhileMoving(t *testing.T) {
	b := newBed(t)
	env := mmBackends(t, b, "")
	ms := b.mmStartMasters(2, env)
	b.StartWorker("worker-w1", mmRPCList(ms, 0), rig.WorkerOpts{ID: "w1", Slots: 2})
	ms[0].WaitJoined(t, "w1")
	alice, _ := signup(t, ms[0].URL, "alice", "ADMIN")
	onB := newClient(t, ms[1].URL).login("alice")
	id, _ := b.submit(alice, map[string]any{"command": []string{"python3", "-u", "-c", mmTickScript}})
	alice.waitStatus(id, "RUNNING", 30*time.Second)
	procs := waitRunProcs(t, id, 1, 10*time.Second)
	ms[0].Kill(t)
	onB.Must("POST", "/api/tasks/"+id+"/cancel", nil, 202, nil)
	l := ms[1].WaitJoined(t, "w1")
	t.Logf("w1 moved: %v", l)
	testutil.Eventually(t, time.Duration(cancelGraceSeconds+10)*time.Second, func() (bool, string) {
		return groupGone(procs[0].pgid), fmt.Sprintf("run %s still running after its cancel", id)
	})
	if tk := onB.waitStatus(id, "CANCELLED", 15*time.Second); tk.Attempt != 1 {
		t.Errorf("cancelled run %v; want attempt 1", tk)
	}
}
