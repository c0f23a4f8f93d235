package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/sweep"
)

// searchScript reports episode_reward 10 at every step when run with
// --good true and 0 otherwise; a hopeless member logs every other step,
// and reaches the rung (step 3) only after a good one has passed it: the
// good one makes the file "passed" in the directory argv[1] names after
// its step 3, and the hopeless one waits for it. A rung's first member
// continues (ASHA's asynchronous promotion, kept once decided), so the
// order is the test's, not the scheduler's. It leaves a file in its output
// dir, which a stop keeps.
const searchScript = `
import os, sys, time
good = sys.argv[sys.argv.index("--good") + 1] == "true"
passed = os.path.join(sys.argv[1], "passed")
open(os.path.join(os.environ["RLSCHED_OUTPUT_DIR"], "note.txt"), "w").write("kept")
for i in range(1, 41):
    step = i if good else 2 * i
    if not good and step >= 3:
        while not os.path.exists(passed):
            time.sleep(0.05)
    print('RLSCHED_METRIC {"step": %d, "episode_reward": %d}' % (step, 10 if good else 0), flush=True)
    if good and step == 3:
        open(passed, "w").close()
    time.sleep(0.25)
`

// searchSpec is a tpe sweep of 3 proposals, 2 at a time, with ASHA at
// step 3 keeping the top half.
func searchSpec(randomSeed uint64, dir string) map[string]any {
	return map[string]any{
		"name": "search", "base": map[string]any{"command": []string{"python3", "-c", searchScript, dir}},
		"method": "tpe", "budget": 3, "maxParallel": 2, "randomSeed": randomSeed,
		"random":    map[string]any{"good": map[string]any{"dist": "choice", "values": []bool{true, false}}},
		"earlyStop": map[string]any{"method": "asha", "rungs": []int{3}, "reductionFactor": 2},
	}
}

// TestSweepSearchStopsEarly is issue 35's controller end to end: a tpe
// sweep with ASHA through `rlsched up`, its first two proposals one good
// and one hopeless (a randomSeed chosen for that); the hopeless member is
// stopped at the rung, CANCELLED with reason early_stopped and the rung in
// its error, its output kept, and its slot takes the third proposal while
// the good one still runs; the sweep then names the best.
func TestSweepSearchStopsEarly(t *testing.T) {
	seed := uint64(0)
	for s := uint64(1); s < 1000 && seed == 0; s++ {
		body, _ := json.Marshal(searchSpec(s, ""))
		spec, err := sweep.Parse(body)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := spec.Initial()
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 2 && string(ms[0].Params) != string(ms[1].Params) {
			seed = s
		}
	}
	if seed == 0 {
		t.Fatal("no randomSeed under 1000 proposes one good and one hopeless member first")
	}
	b := newBed(t)
	up := b.startUp("up", filepath.Join(b.Dir, "data"), "SWEEP_INTERVAL_SECONDS=1")
	alice, _ := signup(t, up.URL, "alice", "ADMIN") // the first user is made an admin

	var created struct {
		ID   string   `json:"id"`
		Runs []string `json:"runs"`
	}
	alice.Must("POST", "/api/sweeps", searchSpec(seed, sharedDir(t)), 202, &created)
	if len(created.Runs) != 2 {
		t.Fatalf("a tpe sweep with maxParallel 2 starts with %d members; want 2", len(created.Runs))
	}
	type info struct {
		Members int            `json:"members"`
		Budget  int            `json:"budget"`
		Runs    []searchMember `json:"runs"`
		Best    *struct {
			Params json.RawMessage `json:"params"`
			Value  float64         `json:"value"`
		} `json:"best"`
		Stops []struct {
			Run   string `json:"run"`
			Error string `json:"error"`
		} `json:"stops"`
		Decisions []struct {
			Run   string  `json:"run"`
			Rung  int     `json:"rung"`
			Cut   float64 `json:"cut"`
			Peers int     `json:"peers"`
			Stop  bool    `json:"stop"`
		} `json:"decisions"`
	}
	get := func() info {
		var in info
		alice.Must("GET", "/api/sweeps/"+created.ID, nil, 200, &in)
		for _, r := range in.Runs {
			b.track(r.ID)
		}
		return in
	}
	var good, bad string
	for _, r := range get().Runs {
		if strings.Contains(string(r.Params), "true") {
			good = r.ID
		} else {
			bad = r.ID
		}
	}
	stopped := alice.waitStatus(bad, "CANCELLED", 60*time.Second)
	var tk searchMember
	alice.Must("GET", "/api/tasks/"+bad, nil, 200, &tk)
	const why = "stopped at rung 1 (step 3): episode_reward 0 below the cut 10 of 2 members"
	if tk.Reason != "early_stopped" || tk.Error != why {
		t.Fatalf("the hopeless member ended %v, reason %q, error %q; want early_stopped, %q", stopped, tk.Reason, tk.Error, why)
	}
	var in info
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		in = get()
		return in.Members == 3, fmt.Sprintf("%d members; want the third proposal in the freed slot", in.Members)
	})
	if g, _ := alice.getTask(good); terminal[g.Status] {
		t.Fatalf("the good member ended (%v) before the third proposal: the slot was not the stopped member's", g)
	}
	if len(in.Stops) != 1 || in.Stops[0].Run != bad || in.Stops[0].Error != why || in.Budget != 3 {
		t.Fatalf("GET /api/sweeps/%s: stops %+v, budget %d; want the hopeless member's", created.ID, in.Stops, in.Budget)
	}
	kept := map[string]string{}
	for _, d := range in.Decisions {
		kept[d.Run] = fmt.Sprintf("rung %d stop %v cut %g of %d", d.Rung, d.Stop, d.Cut, d.Peers)
	}
	if kept[good] != "rung 1 stop false cut 10 of 1" || kept[bad] != "rung 1 stop true cut 10 of 2" {
		t.Fatalf("decisions %+v; want the good member's continue and the hopeless one's stop at rung 1", in.Decisions)
	}
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		files, err := alice.artifacts(bad, "")
		if err != nil {
			return false, err.Error()
		}
		_, ok := files["note.txt"]
		return ok, fmt.Sprintf("the stopped member's outputs: %v; want note.txt kept", files)
	})
	alice.waitStatus(good, "SUCCEEDED", 60*time.Second)
	testutil.Eventually(t, 60*time.Second, func() (bool, string) {
		in = get()
		c := statuses(in.Runs)
		return in.Best != nil && c["RUNNING"]+c["QUEUED"]+c["DISPATCHED"] == 0, fmt.Sprintf("members %v, best %v", c, in.Best)
	})
	if string(in.Best.Params) != `{"good":true}` || in.Best.Value != 10 {
		t.Fatalf("best %s = %v; want {\"good\":true} = 10", in.Best.Params, in.Best.Value)
	}
}

// statuses counts members by status.
func statuses(runs []searchMember) map[string]int {
	out := map[string]int{}
	for _, r := range runs {
		out[r.Status]++
	}
	return out
}

// searchMember is what TestSweepSearchStopsEarly reads of a member.
type searchMember struct {
	ID     string          `json:"id"`
	Status string          `json:"status"`
	Reason string          `json:"reason"`
	Error  string          `json:"error"`
	Params json.RawMessage `json:"params"`
}
