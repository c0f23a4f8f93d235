package webtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/sweep/reference"
)

// referenceScript is issue 35's reference problem as a run (sweep/reference
// in Python): the member's --gamma, --lr, --optimizer and --width give its
// learning curve, reported every 100 steps to 1,000.
const referenceScript = `
import math, sys, time
a = {sys.argv[i][2:]: sys.argv[i + 1] for i in range(1, len(sys.argv) - 1, 2)}
g, lr, w = float(a["gamma"]), float(a["lr"]), float(a["width"])
dg, dl, dw = (g - 0.97) / 0.08, (math.log10(lr) - math.log10(3e-3)) / 0.8, (w - 128) / 256
final = math.exp(-dg * dg / 2) * math.exp(-dl * dl / 2) * {"adam": 1, "rmsprop": 0.85, "sgd": 0.6}[a["optimizer"]] * (1 - 0.5 * dw * dw)
tau = min(max(100 * (1e-2 / lr) ** 0.3, 30), 400)
for step in range(100, 1001, 100):
    print('RLSCHED_METRIC {"step": %d, "episode_reward": %.6f}' % (step, final * (1 - math.exp(-step / tau))), flush=True)
    time.sleep(0.3)
`

// TestSweepSearchReference is issue 35's "done when" in the dashboard: a
// tpe + ASHA sweep of 24 members on the reference problem stops members at
// the rung with their reasons (counted as stopped early, not failed), and
// its page shows the best params, the
// importances of the four params as bars, the parallel coordinates and a
// heatmap of two params chosen by the reader, a drawn param in 6 ranges.
func TestSweepSearchReference(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0, "SWEEP_INTERVAL_SECONDS=1")
	a := s.api().signup("rita")
	spec := fmt.Sprintf(`{"name": "reference", "base": {"command": ["python3", "-c", %q]}, "method": "tpe", "budget": 24,
		"maxParallel": 12, "randomSeed": 7, "random": %s, "earlyStop": {"method": "asha", "rungs": [300], "reductionFactor": 2}}`,
		referenceScript, reference.Random)
	var body map[string]any
	if err := json.Unmarshal([]byte(spec), &body); err != nil {
		t.Fatal(err)
	}
	st, out := a.do("POST", "/api/sweeps", body)
	if st != 202 {
		t.Fatalf("POST /api/sweeps: %d %s", st, out)
	}
	var sw struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(out, &sw)
	testutil.Eventually(t, 180*time.Second, func() (bool, string) {
		var v struct {
			Members int            `json:"members"`
			Counts  map[string]int `json:"counts"`
		}
		_, b := a.do("GET", "/api/sweeps/"+sw.ID+"?runs=false", nil)
		_ = json.Unmarshal(b, &v)
		return v.Members == 24 && v.Counts["SUCCEEDED"]+v.Counts["CANCELLED"] == 24 && v.Counts["CANCELLED"] > 0,
			fmt.Sprintf("%d members, counts %v; want 24 ended, some stopped", v.Members, v.Counts)
	})

	b := newBrowser(t)
	b.signIn(s.url, "rita")
	b.open(s.url + "/sweeps/" + sw.ID)
	b.wait("the search card and the params views", 30*time.Second, `document.querySelector('#sweep-search:not([hidden]) #sweep-best strong') !== null &&
		document.querySelectorAll('#sweep-importance tr').length === 4 && document.querySelector('#sweep-heatmap svg') !== null &&
		document.querySelectorAll('#sweep-parcoords path.pc-line').length >= 8`)
	if why := b.text("#sweep-stops"); !strings.Contains(why, "stopped at rung 1 (step 300): episode_reward") {
		t.Errorf("stops: %q; want the rung's reason", why)
	}
	// A member stopped early did not fail: the progress counts them apart.
	stopped := eval[int](b, `document.querySelectorAll('#sweep-stops tr[data-id]').length`)
	if p := eval[string](b, `(() => { const d = document.querySelector('.sweep-progress').dataset; return d.failed + ' ' + d.stopped; })()`); p != fmt.Sprintf("0 %d", stopped) {
		t.Errorf("progress failed, stopped: %q; want 0 failed, the %d stopped early", p, stopped)
	}
	if r := b.text("#retry-sweep"); r != fmt.Sprintf("Retry %d not succeeded", stopped) {
		t.Errorf("retry button %q", r)
	}
	if imp := b.text("#sweep-importance"); !strings.Contains(imp, "lr") || !strings.Contains(imp, "gamma") || !strings.Contains(imp, "width") || !strings.Contains(imp, "optimizer") {
		t.Errorf("importance: %q; want the four params", imp)
	}
	axes := eval[string](b, `[...document.querySelectorAll('#sweep-parcoords .pc-axis')].map((g) => g.dataset.name).join()`)
	if axes != "gamma,lr,optimizer,width,final reward" {
		t.Errorf("parallel coordinates' axes %q", axes)
	}
	// The reader picks lr across and the optimizer up: lr's draws in 6
	// ranges, the optimizer's three values.
	eval[bool](b, `(() => { const set = (id, v) => { const el = document.querySelector(id); el.value = v; el.dispatchEvent(new Event('change')); };
		set('#heat-x', 'lr'); set('#heat-y', 'optimizer'); return true; })()`)
	b.wait("the lr × optimizer heatmap", 10*time.Second, `document.querySelector('#sweep-heatmap svg').getAttribute('aria-label') === 'final reward over lr and optimizer'`)
	xs := eval[[]string](b, `[...new Set([...document.querySelectorAll('#sweep-heatmap rect.heat-cell')].map((r) => r.dataset.x))]`)
	ys := eval[[]string](b, `[...new Set([...document.querySelectorAll('#sweep-heatmap rect.heat-cell')].map((r) => r.dataset.y))]`)
	if len(xs) != 6 || !strings.Contains(xs[0], "–") || strings.Join(ys, ",") != "sgd,rmsprop,adam" {
		t.Errorf("heatmap columns %q (want 6 ranges of lr), rows %q (want sgd, rmsprop, adam)", xs, ys)
	}
	b.screenshot("24-sweep-reference")
}
