package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// depScript runs for argv[2] seconds and then marks its own end in the
// directory argv[1] names; a run with a parent (RLSCHED_PARENT_1) fails at
// once unless that parent's mark is there: it started before its parent
// ended, an edge the scheduler lost.
const depScript = `import os, sys, time
d, me, p = sys.argv[1], os.environ["RLSCHED_TASK_ID"], os.environ.get("RLSCHED_PARENT_1")
if p and not os.path.exists(os.path.join(d, p)):
    print("parent %s has not ended" % p, flush=True)
    sys.exit(1)
time.sleep(float(sys.argv[2]))
open(os.path.join(d, me), "w").close()
`

// TestMultiMasterDepsSurviveKill is issue 29's failover goal: chains of
// parent → child (after it succeeded) → grandchild (after it ended) on two
// masters; the master that holds half the parents' workers is killed while
// they run. Every child and grandchild still runs once, after its parent
// ended: no edge is lost and none is released early.
func TestMultiMasterDepsSurviveKill(t *testing.T) {
	b := newBed(t)
	env := mmBackends(t, b, "")
	ms := b.mmStartMasters(2, env)
	for i := range 2 {
		id := fmt.Sprintf("w%d", i+1)
		b.StartWorker("worker-"+id, mmRPCList(ms, i%2), rig.WorkerOpts{ID: id, Slots: 20})
	}
	ms[0].WaitJoined(t, "w1")
	ms[1].WaitJoined(t, "w2")
	alice, _ := signup(t, ms[0].URL, "alice", "ADMIN")
	onB := newClient(t, ms[1].URL).login("alice")
	marks := sharedDir(t)
	run := func(secs string, after []map[string]any) string {
		body := map[string]any{"command": []string{"python3", "-c", depScript, marks, secs}}
		if after != nil {
			body["after"] = after
		}
		id, _ := b.submit(alice, body)
		return id
	}
	var parents, children []string
	for range 6 {
		p := run("4", nil)
		c := run("0.5", []map[string]any{{"run": p, "when": "succeeded"}})
		run("0", []map[string]any{{"run": c, "when": "ended"}})
		parents, children = append(parents, p), append(children, c)
	}
	alice.waitAllStatus(parents, "RUNNING", 60*time.Second)
	ms[0].Kill(t)
	ms[1].WaitJoined(t, "w1") // the dead master's worker moves

	all, err := onB.faultTasks("")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tk := range all {
		ids = append(ids, tk.ID)
	}
	if len(ids) != 18 {
		t.Fatalf("%d runs on the surviving master; want the 18 submitted", len(ids))
	}
	final := onB.waitAllStatus(ids, "SUCCEEDED", 120*time.Second)
	for _, id := range ids {
		if tk := final[id]; tk.Attempt != 1 {
			t.Errorf("run %s: attempt %d; want each run once", id, tk.Attempt)
		}
		if _, err := os.Stat(marks + "/" + id); err != nil {
			t.Errorf("run %s left no mark: %v", id, err)
		}
	}
}
