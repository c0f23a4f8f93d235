package webtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// TestEveryPage opens every page of the dashboard, with runs of each kind
// in it (succeeded, failed, running, queued, a sweep, a pipeline), on a
// 1400 px desktop and a 390 px phone, light and dark, and saves a
// screenshot of each (screenshots/tour-<mode>-<page>.png) for a person to
// look at (issue 32). What a test can see it checks: a page comes up,
// reports no error, and on a phone scrolls nothing sideways.
func TestEveryPage(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 1)
	a := s.api().signup("root")
	ok := a.submit(map[string]any{"name": "ppo-cartpole", "project": "tour", "algorithm": "PPO", "episodes": 60,
		"params": map[string]any{"lr": 0.00021056337053284956, "seed": 1}})
	failed := a.submit(map[string]any{"name": "broken-import", "project": "tour",
		"command": []string{"sh", "-c", `echo starting; echo "ModuleNotFoundError: No module named 'gym'" >&2; exit 1`}})
	st, body := a.do("POST", "/api/sweeps", map[string]any{"name": "lr search", "project": "tour",
		"base": map[string]any{"algorithm": "REINFORCE", "episodes": 40}, "grid": map[string]any{"lr": []any{0.003, 0.03}}, "seedCount": 2})
	if st != 202 {
		t.Fatalf("POST /api/sweeps: %d %s", st, body)
	}
	var sw struct {
		ID   string   `json:"id"`
		Runs []string `json:"runs"`
	}
	if err := json.Unmarshal(body, &sw); err != nil {
		t.Fatal(err)
	}
	st, body = a.do("POST", "/api/pipelines", map[string]any{"name": "train-eval", "steps": []map[string]any{
		{"name": "train", "command": []string{"true"}},
		{"name": "eval", "command": []string{"false"}, "after": []map[string]string{{"step": "train"}}},
	}})
	if st != 202 {
		t.Fatalf("POST /api/pipelines: %d %s", st, body)
	}
	var pl struct {
		ID   string            `json:"id"`
		Runs map[string]string `json:"runs"`
	}
	if err := json.Unmarshal(body, &pl); err != nil {
		t.Fatal(err)
	}
	a.waitStatus(ok, "SUCCEEDED", 90*time.Second)
	a.waitStatus(failed, "FAILED", 60*time.Second)
	a.waitStatus(pl.Runs["eval"], "FAILED", 60*time.Second)
	for _, id := range sw.Runs {
		a.waitStatus(id, "SUCCEEDED", 120*time.Second)
	}
	// The GPU held, and a run waiting for it.
	running := a.submit(map[string]any{"name": "long-gpu-run", "project": "tour", "gpus": 1, "command": []string{"sleep", "600"}})
	a.waitStatus(running, "RUNNING", 60*time.Second)
	queued := a.submit(map[string]any{"name": "waits-for-the-gpu", "project": "tour", "gpus": 1, "command": []string{"true"}})
	t.Cleanup(func() { a.cancel(queued); a.cancel(running) })

	pages := []struct{ name, path, ready string }{
		{"runs", "/runs", fmt.Sprintf(`document.querySelector('#runs-table tr[data-id=%q]') !== null`, queued)},
		{"run", "/runs/" + ok, `document.querySelector('#log-info') && document.querySelector('#log-info').dataset.state === 'eof' && document.querySelector('[data-chart="episode_reward"] path.line[data-points]') !== null`},
		{"run-failed", "/runs/" + failed, `document.querySelector('#error-tail pre') !== null`},
		{"run-running", "/runs/" + running, `document.querySelector('#log-info') !== null`},
		{"sweeps", "/sweeps", fmt.Sprintf(`document.querySelector('#sweeps-table tr[data-id=%q]') !== null`, sw.ID)},
		{"sweep", "/sweeps/" + sw.ID, `document.querySelectorAll('#groups tr.group-row').length === 2`},
		{"pipeline", "/pipelines/" + pl.ID, `document.querySelectorAll('#pipeline-graph .pipeline-layer').length === 2`},
		{"compare", "/compare?by=seed&ids=" + strings.Join(append([]string{ok}, sw.Runs...), ","), `document.querySelectorAll('[data-chart="compare:episode_reward"] path.line[data-points]').length >= 2 && document.querySelector('#params-diff tbody tr') !== null`},
		{"submit", "/submit", `document.querySelector('#algorithm') !== null`},
		{"queue", "/queue", fmt.Sprintf(`document.querySelector('#queue') !== null && document.querySelector('#queue').textContent.includes(%q) && document.querySelector('#quotas tr[data-quota-user]') !== null`, "waits-for-the-gpu")},
		{"workers", "/workers", `document.querySelector('#workers .gpu') !== null`},
		{"health", "/health", `document.querySelector('#health-status .badge') !== null`},
		{"users", "/users", `document.querySelector('#users tr[data-user="root"]') !== null`},
		{"settings", "/settings", `document.querySelector('#pw-form') !== null`},
		{"not-found", "/no-such-page", `document.querySelector('#main .empty') !== null && document.querySelector('.mainnav a[href="/runs"]').offsetParent !== null`},
	}
	b := newBrowser(t)
	b.signIn(s.url, "root")
	for _, m := range []struct {
		name  string
		phone bool
		dark  bool
	}{{"desktop", false, false}, {"desktop-dark", false, true}, {"phone", true, false}, {"phone-dark", true, true}} {
		if m.phone {
			b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
		} else {
			b.do("desktop viewport", chromedp.EmulateViewport(1400, 1000))
		}
		scheme := "light"
		if m.dark {
			scheme = "dark"
		}
		if _, err := chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}}); err != nil {
			t.Fatal(err)
		}
		for _, p := range pages {
			b.open(s.url + p.path)
			b.wait(p.name+" ("+m.name+")", 20*time.Second, p.ready)
			if m.phone {
				if over := eval[string](b, `(() => {
					if (document.documentElement.scrollWidth <= window.innerWidth + 1) return '';
					const wide = [...document.querySelectorAll('#main *')].filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest('.table-wrap, .logview, pre, .chart-scroll'));
					return wide.slice(0, 3).map((e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + '.' + [...e.classList].join('.')).join(', ') || 'something';
				})()`); over != "" {
					t.Errorf("%s scrolls sideways on a phone (%s): %s", p.name, m.name, over)
				}
				// Nor do these pages' tables: a card per row, or the
				// columns that matter only.
				if p.name == "runs" || p.name == "queue" || p.name == "compare" || p.name == "run" || p.name == "sweep" {
					if n := eval[int](b, `[...document.querySelectorAll('#main .table-wrap')].filter((w) => w.offsetParent !== null && w.scrollWidth > w.clientWidth + 1).length`); n > 0 {
						t.Errorf("%s: %d tables scroll sideways on a phone (%s)", p.name, n, m.name)
					}
				}
			}
			b.screenshot("tour-" + m.name + "-" + p.name)
		}
	}
	// A random sweep's value reads to 4 significant digits in tables; the
	// cell's title keeps it whole.
	b.open(s.url + "/compare?ids=" + ok + "," + sw.Runs[0] + "&all=1")
	b.wait("the compare table", 20*time.Second, `document.querySelector('#params-diff td[data-key="param lr"]') !== null`)
	if got := eval[[]string](b, `(() => { const c = document.querySelector('#params-diff tr[data-id] td[data-key="param lr"]'); return [c.textContent, c.title]; })()`); got[0] != "0.0002106" || got[1] != "0.00021056337053284956" {
		t.Errorf("the lr cell reads %q (title %q), want 0.0002106 (0.00021056337053284956)", got[0], got[1])
	}
}
