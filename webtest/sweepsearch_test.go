package webtest

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/sweep"
)

// searchScript reports 10 with --good true and 0 otherwise; a hopeless
// member logs every other step and reaches the rung (step 3) only after a
// good one has passed it (the good one makes the file "passed" in the
// directory argv[1] names; the hopeless one waits for it): a rung's first
// member continues, so the order is the test's.
const searchScript = `
import os, sys, time
good = sys.argv[sys.argv.index("--good") + 1] == "true"
passed = os.path.join(sys.argv[1], "passed")
for i in range(1, 25):
    step = i if good else 2 * i
    if not good and step >= 3:
        while not os.path.exists(passed):
            time.sleep(0.05)
    print('RLSCHED_METRIC {"step": %d, "episode_reward": %d}' % (step, 10 if good else 0), flush=True)
    if good and step == 3:
        open(passed, "w").close()
    time.sleep(0.2)
`

// TestSweepSearchPage: the sweep page of a tpe + ASHA sweep shows the best
// params with their interval, each rung's kept decisions, the member
// stopped early and why (also in its group's member rows), and that
// importance needs more proposals.
func TestSweepSearchPage(t *testing.T) {
	needs(t)
	t.Parallel()
	dir, err := os.MkdirTemp("", "rlsched-handshake-") // written by the runs, each under its own uid
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	spec := func(seed uint64) map[string]any {
		return map[string]any{"name": "search", "base": map[string]any{"command": []string{"python3", "-c", searchScript, dir}},
			"method": "tpe", "budget": 2, "maxParallel": 2, "randomSeed": seed,
			"random":    map[string]any{"good": map[string]any{"dist": "choice", "values": []bool{true, false}}},
			"earlyStop": map[string]any{"method": "asha", "rungs": []int{3}, "reductionFactor": 2}}
	}
	seed := uint64(0)
	for s := uint64(1); s < 1000 && seed == 0; s++ {
		body, _ := json.Marshal(spec(s))
		p, err := sweep.Parse(body)
		if err != nil {
			t.Fatal(err)
		}
		if ms, err := p.Initial(); err == nil && string(ms[0].Params) != string(ms[1].Params) {
			seed = s
		}
	}
	s := startUp(t, 0, "SWEEP_INTERVAL_SECONDS=1")
	a := s.api().signup("erin")
	st, body := a.do("POST", "/api/sweeps", spec(seed))
	if st != 202 {
		t.Fatalf("POST /api/sweeps: %d %s", st, body)
	}
	var sw struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &sw)
	testutil.Eventually(t, 90*time.Second, func() (bool, string) {
		var v struct {
			Counts map[string]int `json:"counts"`
		}
		_, b := a.do("GET", "/api/sweeps/"+sw.ID+"?runs=false", nil)
		_ = json.Unmarshal(b, &v)
		return v.Counts["SUCCEEDED"] == 1 && v.Counts["CANCELLED"] == 1, fmt.Sprintf("counts %v", v.Counts)
	})

	b := newBrowser(t)
	b.signIn(s.url, "erin")
	b.open(s.url + "/sweeps/" + sw.ID)
	b.wait("the search card", 20*time.Second, `document.querySelector('#sweep-search:not([hidden]) #sweep-best strong') !== null &&
		document.querySelectorAll('#sweep-stops tr[data-id]').length === 1`)
	if best := b.text("#sweep-best"); !strings.Contains(best, "good=true") || !strings.Contains(best, "= 10 [10, 10]") {
		t.Errorf("best: %q", best)
	}
	if why := b.text("#sweep-stops"); !strings.Contains(why, "stopped at rung 1 (step 3): episode_reward 0 below the cut 10 of 2 members") {
		t.Errorf("stops: %q", why)
	}
	if r := eval[string](b, `[...document.querySelectorAll('#sweep-rungs tr[data-rung="1"] td')].map((td) => td.textContent).join(' ')`); r != "1 3 1 1 10" {
		t.Errorf("rung 1's decisions: %q; want step 3, 1 continued, 1 stopped, last cut 10", r)
	}
	if imp := b.text("#sweep-importance"); !strings.Contains(imp, "needs 8 finished proposals") {
		t.Errorf("importance: %q", imp)
	}
	b.click(`#groups tr.group-row[data-rank="2"]`)
	b.wait("the stopped member's reason in its group", 10*time.Second, `[...document.querySelectorAll('#groups tr.members-row .stop-reason')].some((e) => e.textContent.includes('stopped at rung 1'))`)
	b.screenshot("23-sweep-search")
}
