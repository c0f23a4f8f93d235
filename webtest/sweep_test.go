package webtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestSweepPages walks a sweep of the default trainer (3 learning rates ×
// 3 seeds, lr=-1 refused by train.py) through the Sweeps list, the sweep
// page (groups sorted by mean final reward, a ±std band per group, a click
// through to a group's runs, Retry), the Runs page's filters and the run
// page's links to its sweep and its reruns.
func TestSweepPages(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	a := s.api().signup("dana")
	st, body := a.do("POST", "/api/sweeps", map[string]any{"name": "lr search", "project": "sweeps",
		"base": map[string]any{"algorithm": "REINFORCE", "episodes": 60}, "grid": map[string]any{"lr": []any{0.003, 0.03, -1}},
		"seedCount": 3, "maxParallel": 4})
	if st != 202 {
		t.Fatalf("POST /api/sweeps: %d %s", st, body)
	}
	var sw struct {
		ID   string   `json:"id"`
		Runs []string `json:"runs"`
	}
	if err := json.Unmarshal(body, &sw); err != nil || len(sw.Runs) != 9 {
		t.Fatalf("sweep answer %s: %v", body, err)
	}
	ended := func() (bool, string) {
		var v struct {
			Counts map[string]int `json:"counts"`
		}
		_, b := a.do("GET", "/api/sweeps/"+sw.ID+"?runs=false", nil)
		_ = json.Unmarshal(b, &v)
		return v.Counts["SUCCEEDED"] == 6 && v.Counts["FAILED"] == 3, fmt.Sprintf("counts %v", v.Counts)
	}
	testutil.Eventually(t, 3*time.Minute, ended)

	b := newBrowser(t)
	b.signIn(s.url, "dana")
	b.click(`a[data-nav="sweeps"]`)
	b.wait("the sweep in the list", 15*time.Second, fmt.Sprintf(`document.querySelector('#sweeps-table tr[data-id=%q] .sweep-progress[data-done="6"][data-failed="3"]') !== null`, sw.ID))
	b.screenshot("20-sweeps")

	b.click(fmt.Sprintf(`#sweeps-table tr[data-id=%q] .name a`, sw.ID))
	b.wait("three groups and two bands", 20*time.Second, `document.querySelectorAll('#groups tr.group-row').length === 3 &&
		document.querySelectorAll('[data-chart="sweep"] path.band').length === 2 && document.querySelector('#sweep-metric').value === 'episode_reward'`)
	// Best mean first; the refused lr has no final reward and comes last.
	means := eval[[]string](b, `[...document.querySelectorAll('#groups tr.group-row td.reward')].map((td) => td.textContent)`)
	if len(means) != 3 || !strings.Contains(means[0], "±") || !strings.Contains(means[1], "±") || means[2] != "—" {
		t.Errorf("reward cells %q", means)
	}
	if lrs := eval[[]string](b, `[...document.querySelectorAll('#groups tr.group-row')].map((tr) => tr.children[1].textContent)`); lrs[2] != "-1" {
		t.Errorf("group order by lr %q: want -1 last", lrs)
	}
	if n := eval[string](b, `document.querySelector('#groups tr.group-row').children[3].textContent`); n != "3" {
		t.Errorf("n of the best group %q, want 3", n)
	}
	b.screenshot("21-sweep")

	// The params view: a line per group with a final reward over the lr
	// axis (log: 0.003 to 0.03 spans one decade, so linear) and the
	// reward's; no heatmap with one varying param. The best group's line
	// is drawn last, on top.
	b.wait("the params view", 10*time.Second, `document.querySelectorAll('#sweep-parcoords path.pc-line').length === 2 &&
		[...document.querySelectorAll('#sweep-parcoords .pc-axis')].map((g) => g.dataset.name).join() === 'lr,final reward' &&
		document.querySelector('#sweep-heatmap') === null`)
	if top, best := eval[string](b, `[...document.querySelectorAll('#sweep-parcoords path.pc-line')].pop().dataset.key`),
		eval[string](b, `document.querySelector('#groups tr.group-row[data-rank="1"]').dataset.key`); top != best {
		t.Errorf("the line on top is group %s, want the best %s", top, best)
	}
	// The heatmap itself, given two params: cells at each pair, the mean of
	// the groups at one pair, a blank cell where no group is.
	eval[bool](b, `(window.__hm = null, import('/static/js/parcoords.js').then((m) => {
		window.__hm = m.heatmap([{ key: 'a', params: { lr: 0.1, gamma: 0.9 }, value: 1 }, { key: 'b', params: { lr: 0.1, gamma: 0.99 }, value: 3 },
			{ key: 'c', params: { lr: 0.01, gamma: 0.9 }, value: 2 }, { key: 'd', params: { lr: 0.01, gamma: 0.9, clip: 1 }, value: 4 }], 'lr', 'gamma', 'reward');
		window.__hm.id = 'test-heatmap';
		document.querySelector('#sweep-params').appendChild(window.__hm);
	}), true)`)
	b.wait("the test heatmap", 10*time.Second, `document.querySelector('#test-heatmap') !== null`)
	cells := eval[map[string]string](b, `Object.fromEntries([...document.querySelectorAll('#test-heatmap rect.heat-cell')].map((r) => [r.dataset.x + '/' + r.dataset.y, r.dataset.value]))`)
	if want := map[string]string{"0.01/0.9": "3", "0.01/0.99": "", "0.1/0.9": "1", "0.1/0.99": "3"}; fmt.Sprint(cells) != fmt.Sprint(want) {
		t.Errorf("heatmap cells %v, want %v", cells, want)
	}
	b.screenshot("21b-sweep-params")
	// A click on the best line opens its group, as its row's click does.
	b.click(`#sweep-parcoords path.pc-line:last-of-type`)
	b.wait("the best group opened from its line", 10*time.Second, `document.querySelector('#groups tr.group-row[data-rank="1"]').classList.contains('selected')`)
	b.click(`#groups tr.group-row[data-rank="1"]`) // closed again, as before
	// Each click waits for its state, so a second click never lands before
	// the first one's redraw (CI under load saw the group stay closed).
	b.wait("the best group closed", 10*time.Second, `!document.querySelector('#groups tr.group-row[data-rank="1"]').classList.contains('selected')`)

	// A click opens the group's runs and leaves only its curve in the chart.
	b.click(`#groups tr.group-row[data-rank="1"]`)
	b.wait("the best group's runs", 30*time.Second, `document.querySelectorAll('#groups tr.members-row tr[data-id]').length === 3 &&
		[...document.querySelectorAll('[data-chart="sweep"] path.band')].length === 1`)
	b.screenshot("22-sweep-group")

	// Retry reruns the three failed members.
	b.wait("the retry button", 10*time.Second, `(document.querySelector('#retry-sweep') || {}).textContent === 'Retry 3 failed'`)
	b.click("#retry-sweep")
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		_, body := a.do("GET", "/api/tasks?sweep="+sw.ID+"&limit=50", nil)
		n := strings.Count(string(body), `"rerunOf"`)
		return n == 3, fmt.Sprintf("%d retried runs", n)
	})
	testutil.Eventually(t, 2*time.Minute, ended) // the retries fail as their origins did

	// The Runs page filtered to a group: its three members.
	b.open(s.url + "/runs?sweep=" + sw.ID + "&param.lr=0.03")
	b.wait("three members with lr=0.03", 15*time.Second, `document.querySelectorAll('#runs-table tbody tr').length === 3 && document.querySelector('#filter-param').value === 'lr=0.03'`)
	if href := eval[string](b, `document.querySelector('#runs-csv').getAttribute('href')`); !strings.Contains(href, "format=csv") || !strings.Contains(href, "sweep="+sw.ID) {
		t.Errorf("CSV link %q", href)
	}
	b.typeInto("#filter-name", "SEED=2")
	b.wait("one member named seed=2", 10*time.Second, `document.querySelectorAll('#runs-table tbody tr').length === 1 && location.search.includes('name=SEED')`)
	b.screenshot("23-runs-filtered")

	// Grouped by sweep: one header for the sweep's 12 runs (9 members and
	// their 3 retries), and it folds.
	b.open(s.url + "/runs?group=sweep")
	head := fmt.Sprintf(`#runs-table tr.group-head[data-group="s:%s"]`, sw.ID)
	b.wait("the sweep's group", 15*time.Second, fmt.Sprintf(`document.querySelector('%s') && document.querySelector('%s').textContent.includes('12 runs') && document.querySelectorAll('#runs-table tr[data-id]').length === 12`, head, head))
	b.screenshot("23b-runs-grouped")
	b.click(head + " .group-toggle")
	b.wait("the group folded", 10*time.Second, fmt.Sprintf(`document.querySelectorAll('#runs-table tr[data-id]').length === 0 && document.querySelector('%s .group-toggle').getAttribute('aria-expanded') === 'false'`, head))

	// The run page links its sweep, its origin and its reruns.
	failed := sw.Runs[8] // lr=-1, seed 2
	b.open(s.url + "/runs/" + failed)
	b.wait("the sweep link and a rerun", 15*time.Second, fmt.Sprintf(`document.querySelector('#run-sweep') && document.querySelector('#run-sweep').getAttribute('href') === '/sweeps/%s' &&
		document.querySelectorAll('#reruns a[href^="/runs/"]').length === 1`, sw.ID))
	b.click(`#reruns a[href^="/runs/"]`)
	b.wait("the retry's origin", 15*time.Second, fmt.Sprintf(`(document.querySelector('#run-rerun-of') || {}).textContent === %q`, failed))
	b.screenshot("24-run-retried")
}

// TestSweepFromForm: the New run form submits a sweep: a param's
// comma-separated values are a grid axis, the seeds per cell multiply it,
// the button and the count say so, and the sweep's page opens.
func TestSweepFromForm(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	owen := s.api().signup("owen")
	b := newBrowser(t)
	b.signIn(s.url, "owen")
	b.open(s.url + "/submit")
	b.wait("the submit form", 10*time.Second, `document.querySelector('#submit-form') !== null`)
	b.typeInto("#episodes", "20")
	b.click("#add-param")
	b.typeInto("#params-rows .kvrow:last-child .param-key", "lr")
	b.typeInto("#params-rows .kvrow:last-child .param-value", "0.003, 0.03")
	b.typeInto("#name", "form sweep")
	b.click("#as-sweep")
	b.typeInto("#seedCount", "2")
	b.wait("the sweep's size", 5*time.Second, `document.querySelector('#sweep-size').textContent === '4 runs' && document.querySelector('#submit-run').textContent === 'Submit sweep'`)
	b.screenshot("25-submit-sweep")
	b.click("#submit-run")
	b.wait("the sweep's page", 15*time.Second, `location.pathname.startsWith('/sweeps/') && document.querySelector('h1') && document.querySelector('h1').textContent.includes('form sweep')`)
	id := strings.TrimPrefix(eval[string](b, `location.pathname`), "/sweeps/")
	var sw struct {
		Members int             `json:"members"`
		Spec    json.RawMessage `json:"spec"`
	}
	_, body := owen.do("GET", "/api/sweeps/"+id+"?runs=false", nil)
	if err := json.Unmarshal(body, &sw); err != nil || sw.Members != 4 || !strings.Contains(string(sw.Spec), `"grid":{"lr":[0.003,0.03]}`) {
		t.Fatalf("the sweep %s: %s (%v); want 4 members of a grid over lr", id, body, err)
	}
}
