package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/netns"
	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// allreduce is a stdlib "allreduce" over TCP that every rank of a group
// runs: rank 0 listens on MASTER_PORT, the others connect to
// MASTER_ADDR, each sends rank+1, rank 0 sums and sends the sum back, and
// every rank prints it with what the group told it.
const allreduce = `
import os, socket, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
print("rank=%d world=%d node_rank=%s nodes=%s hosts=%s master=%s:%d" % (rank, world,
      os.environ["RLSCHED_NODE_RANK"], os.environ["RLSCHED_NODES"], os.environ["RLSCHED_HOSTS"], addr, port), flush=True)
if rank == 0:
    srv = socket.create_server(("", port))
    srv.settimeout(60)
    total, peers = 1, []
    for _ in range(world - 1):
        c, _ = srv.accept()
        c.settimeout(60)
        total += int(c.makefile().readline())
        peers.append(c)
    for c in peers:
        c.sendall(b"%d\n" % total)
        c.close()
else:
    deadline = time.time() + 60
    while True:
        try:
            c = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)
    c.settimeout(60)
    c.sendall(b"%d\n" % (rank + 1))
    total = int(c.makefile().readline())
print("allreduce sum=%d rank=%d" % (total, rank), flush=True)
`

// TestGroupNetns (issue 29) runs a 2-node group on two workers in network
// namespaces of their own, each with its own address, beside a master in
// the test's namespace: both ranks run the allreduce and agree, each with
// its own log; then SIGKILLing one rank's worker stops the other rank
// within 10 s and requeues the group, which runs again once the worker is
// back.
func TestGroupNetns(t *testing.T) {
	b := newBed(t)
	nt := netns.New(t, 2)
	args := rig.MasterArgs(filepath.Join(b.Dir, "data-master"), 0, 0, "")
	args[slices.Index(args, "--bind")+1] = nt.Host // reachable from the namespaces
	m := b.AwaitMaster(b.Start("master", b.MasterEnv(), args...))
	ids := []string{"n1", "n2"}
	workers := make([]*proc, 2)
	start := func(i int) {
		workers[i] = b.StartVia("worker-"+ids[i], netns.Exec(nt.NS[i]), b.ServerEnv("WORKER_JOIN_TOKEN="+b.JoinToken),
			rig.WorkerArgs(m.RPC, ids[i], 2, 0, filepath.Join(b.Dir, "worker-"+ids[i]))...)
	}
	start(0)
	start(1)
	m.WaitJoined(t, "n1")
	m.WaitJoined(t, "n2")
	signup(t, m.URL, "admin", "ADMIN")
	user, _ := signup(t, m.URL, "nina", "USER")
	addrOf := map[string]string{"n1": nt.Addrs[0], "n2": nt.Addrs[1]}

	id, _ := b.submit(user, map[string]any{"command": []string{"python3", "-c", allreduce}, "nodes": 2})
	tk := user.waitStatus(id, "SUCCEEDED", 60*time.Second)
	rank0 := tk.Worker
	other := map[string]string{"n1": "n2", "n2": "n1"}[rank0]
	if other == "" {
		t.Fatalf("the group ran on %q, want rank 0 on n1 or n2", rank0)
	}
	hosts := addrOf[rank0] + "," + addrOf[other]
	for rank, worker := range []string{rank0, other} {
		text := groupLog(t, user, id, rank)
		for _, want := range []string{
			fmt.Sprintf("rank=%d world=2 node_rank=%d nodes=2 hosts=%s master=%s:", rank, rank, hosts, addrOf[rank0]),
			fmt.Sprintf("allreduce sum=3 rank=%d", rank),
		} {
			if !strings.Contains(text, want) {
				t.Fatalf("rank %d's log (worker %s) lacks %q:\n%s", rank, worker, want, text)
			}
		}
	}
	if tk.Attempt != 1 {
		t.Fatalf("the group took attempt %d, want 1: %v", tk.Attempt, tk)
	}

	// A member lost: its worker killed. The other rank stops within 10 s,
	// and the group is requeued as one run.
	submitted := time.Now()
	id, _ = b.submit(user, map[string]any{"command": []string{"sleep", "600"}, "nodes": 2})
	var procs map[int]runProc
	testutil.Eventually(t, 60*time.Second, func() (bool, string) {
		procs = groupProcs(id)
		return len(procs) == 2, fmt.Sprintf("processes of the group by rank: %v", procs)
	})
	t.Logf("both ranks' processes ran %v after the submission", time.Since(submitted).Round(time.Millisecond))
	user.waitStatus(id, "RUNNING", 30*time.Second)
	victim := map[string]int{"n1": 0, "n2": 1}[other]
	killedAt := time.Now()
	workers[victim].Kill(t)
	testutil.WaitGroupGone(t, procs[0].pgid, 10*time.Second) // rank 0, on the worker left
	t.Logf("rank 0 stopped %v after rank 1's worker was killed", time.Since(killedAt).Round(time.Millisecond))
	tk = user.waitTask(id, 15*time.Second, "requeued", func(tk task) bool { return tk.Status == "QUEUED" && tk.Attempt == 2 })
	var st struct {
		Attempt int    `json:"attempt"`
		Status  string `json:"status"`
		Reason  string `json:"pendingReason"`
	}
	user.Must("GET", "/api/tasks/"+id, nil, 200, &st)
	if st.Status != "QUEUED" {
		t.Fatalf("after the loss: %+v", st)
	}

	// Its worker back, the group runs again, both ranks; a cancel stops both.
	start(victim)
	tk = user.waitTask(id, 60*time.Second, "running again", func(tk task) bool { return tk.Status == "RUNNING" && tk.Attempt == 2 })
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		procs = groupProcs(id)
		return len(procs) == 2, fmt.Sprintf("processes of the group by rank: %v", procs)
	})
	user.Must("POST", "/api/tasks/"+id+"/cancel", nil, 202, nil)
	user.waitStatus(id, "CANCELLED", 30*time.Second)
	for _, p := range procs {
		testutil.WaitGroupGone(t, p.pgid, 10*time.Second)
	}
}

// groupLog is rank's log of run id, through REST (?rank=N).
func groupLog(t *testing.T, c *client, id string, rank int) string {
	t.Helper()
	r, err := c.Do("GET", "/api/monitor/logs/"+id+"?offset=0&limit=1048576&rank="+strconv.Itoa(rank), nil, "Accept", "text/plain")
	if err != nil || r.Status != 200 {
		t.Fatalf("GET rank %d's log of %s: %v %v", rank, id, r, err)
	}
	return string(r.Body)
}

// groupProcs are the live processes of run id by RLSCHED_NODE_RANK.
func groupProcs(id string) map[int]runProc {
	out := map[int]runProc{}
	for _, p := range runProcs(id) {
		env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.pid), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, "RLSCHED_NODE_RANK="); ok {
				if n, err := strconv.Atoi(v); err == nil && p.pid == p.pgid {
					out[n] = p
				}
			}
		}
	}
	return out
}

// TestGroupMemberFails (issue 29): on two workers of one machine, a
// group's rank 1 exits 3 while rank 0 would sleep; rank 0 is stopped at
// once and the group fails as one run, its error naming rank 1 and its
// error tail rank 1's last lines.
func TestGroupMemberFails(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{})
	b.StartWorker("worker-f1", m.RPC, rig.WorkerOpts{ID: "f1"})
	b.StartWorker("worker-f2", m.RPC, rig.WorkerOpts{ID: "f2"})
	m.WaitJoined(t, "f1")
	m.WaitJoined(t, "f2")
	signup(t, m.URL, "admin", "ADMIN")
	user, _ := signup(t, m.URL, "nina", "USER")

	// Rank 1 gives up only once rank 0 has said it is up (the file is
	// written after the line), or the group may end before rank 0 says
	// anything and its log is empty for a reason that is not under test.
	up := filepath.Join(sharedDir(t), "rank0-up")
	id, _ := b.submit(user, map[string]any{"nodes": 2, "command": []string{"python3", "-c",
		"import os, sys, time\nr = int(os.environ['RANK'])\nprint('rank', r, 'up', flush=True)\n" +
			"if r == 0:\n    open(" + strconv.Quote(up) + ", 'w').close()\n" +
			"if r == 1:\n    t = time.time()\n    while not os.path.exists(" + strconv.Quote(up) + ") and time.time() - t < 60: time.sleep(0.02)\n" +
			"    print('rank 1 gives up', flush=True); sys.exit(3)\ntime.sleep(600)"}})
	tk := user.waitStatus(id, "FAILED", 60*time.Second)
	other := map[string]string{"f1": "f2", "f2": "f1"}[tk.Worker]
	if want := "rank 1 (worker " + other + ") exited with code 3"; tk.Error != want {
		t.Fatalf("the group's error is %q, want %q (%v)", tk.Error, want, tk)
	}
	var full struct {
		ErrorTail string `json:"errorTail"`
		Attempt   int    `json:"attempt"`
	}
	user.Must("GET", "/api/tasks/"+id, nil, 200, &full)
	if !strings.Contains(full.ErrorTail, "rank 1 gives up") || full.Attempt != 1 {
		t.Fatalf("errorTail %q attempt %d: want rank 1's last lines, attempt 1", full.ErrorTail, full.Attempt)
	}
	if text := groupLog(t, user, id, 0); !strings.Contains(text, "rank 0 up") {
		t.Fatalf("rank 0's log:\n%s", text)
	}
	testutil.WaitFor(t, 10*time.Second, "no process of the group left", func() bool { return len(runProcs(id)) == 0 })
}
