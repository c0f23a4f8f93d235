package webtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestSweepViewLayout: a sweep's page at 1400 and 390 px with one and with
// three varying params (issue 32). The parallel-coordinates plot is drawn
// no smaller than a readable size and its outer axes' tick labels lie
// clear of the lines (the first axis's to its left, the metric's to its
// right; a middle axis's sit on a backing drawn over the lines); on a
// phone the groups table is a card per group and scrolls nothing sideways.
func TestSweepViewLayout(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	a := s.api().signup("vera")
	sweep := func(name string, grid map[string]any, n int) string {
		return a.sweepDone(map[string]any{"name": name, "project": "layout",
			"base": map[string]any{"algorithm": "REINFORCE", "episodes": 10}, "grid": grid, "seedCount": 1, "maxParallel": 4}, n, 3*time.Minute)
	}
	one := sweep("one param", map[string]any{"lr": []any{0.003, 0.01, 0.03}}, 3)
	three := sweep("three params", map[string]any{"lr": []any{0.003, 0.03}, "gamma": []any{0.9, 0.99}, "hidden": []any{16, 64}}, 8)

	b := newBrowser(t)
	b.signIn(s.url, "vera")
	for _, c := range []struct {
		name, id string
		groups   int
	}{{"one", one, 3}, {"three", three, 8}} {
		b.do("desktop viewport", chromedp.EmulateViewport(1400, 1000))
		b.open(s.url + "/sweeps/" + c.id)
		b.wait(c.name+": the params view", 20*time.Second, fmt.Sprintf(`document.querySelectorAll('#sweep-parcoords path.pc-line').length === %d`, c.groups))
		if w := eval[float64](b, `document.querySelector('#sweep-parcoords svg').getBoundingClientRect().width`); w < 560 {
			t.Errorf("%s: the parallel-coordinates plot is %.0f px wide, want at least 560", c.name, w)
		}
		if h := eval[float64](b, `document.querySelector('#sweep-parcoords svg').getBoundingClientRect().height`); h < 260 {
			t.Errorf("%s: the parallel-coordinates plot is %.0f px high, want at least 260", c.name, h)
		}
		// A tick label of the first or the metric axis that a line's stroke
		// crosses (sampled over its box) collides with it.
		if hit := eval[[]string](b, `(() => {
			const svg = document.querySelector('#sweep-parcoords svg'), lines = [...svg.querySelectorAll('path.pc-line')];
			const axes = [...svg.querySelectorAll('.pc-axis')], out = [];
			for (const ax of [axes[0], axes[axes.length - 1]]) for (const t of ax.querySelectorAll('.pc-tick')) {
				const r = t.getBBox();
				for (let i = 0; i <= 6; i++) for (let j = 0; j <= 3; j++) {
					const p = svg.createSVGPoint(); p.x = r.x + r.width * i / 6; p.y = r.y + r.height * j / 3;
					if (lines.some((l) => l.isPointInStroke(p))) { out.push(ax.dataset.name + ' ' + t.textContent); i = 7; break; }
				}
			}
			return out;
		})()`); len(hit) > 0 {
			t.Errorf("%s: tick labels under a line: %q", c.name, hit)
		}
		if bad := eval[[]string](b, `[...document.querySelectorAll('#sweep-parcoords .pc-axis')].slice(1, -1).flatMap((ax) => [...ax.querySelectorAll('.pc-tick')].filter((t) => !t.classList.contains('pc-halo')).map((t) => ax.dataset.name + ' ' + t.textContent))`); len(bad) > 0 {
			t.Errorf("%s: a middle axis's tick labels without a backing: %q", c.name, bad)
		}
		b.screenshotOf("sweepview-"+c.name+"-desktop-params", "#sweep-params")

		b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
		b.open(s.url + "/sweeps/" + c.id)
		b.wait(c.name+": the groups on a phone", 20*time.Second, fmt.Sprintf(`document.querySelectorAll('#groups tr.group-row').length === %d && document.querySelectorAll('#sweep-parcoords path.pc-line').length === %d`, c.groups, c.groups))
		if over := eval[bool](b, `(() => { const w = document.querySelector('#groups'); return w.scrollWidth > w.clientWidth + 1 || document.documentElement.scrollWidth > window.innerWidth + 1; })()`); over {
			t.Errorf("%s: the groups table scrolls sideways on a phone", c.name)
		}
		// One param's plot fits the phone's card whole, at its size.
		if c.name == "one" {
			if got := eval[[]float64](b, `(() => { const box = document.querySelector('#sweep-parcoords'), svg = box.querySelector('svg'); return [svg.getBoundingClientRect().width, box.clientWidth, svg.viewBox.baseVal.width]; })()`); got[0] > got[1]+1 || got[0] != got[2] {
				t.Errorf("one: the plot is %.0f px in a %.0f px box, drawn from %.0f", got[0], got[1], got[2])
			}
		}
		b.screenshotOf("sweepview-"+c.name+"-phone-groups", "#groups")
		b.screenshotOf("sweepview-"+c.name+"-phone-params", "#sweep-params")
		b.click(`#groups tr.group-row[data-rank="1"]`)
		b.wait(c.name+": the best group's runs on a phone", 10*time.Second, `document.querySelectorAll('#groups tr.members-row tr[data-id]').length === 1`)
		if over := eval[bool](b, `(() => { const w = document.querySelector('#groups'); return w.scrollWidth > w.clientWidth + 1 || document.documentElement.scrollWidth > window.innerWidth + 1; })()`); over {
			t.Errorf("%s: the opened group scrolls sideways on a phone", c.name)
		}
		b.screenshotOf("sweepview-"+c.name+"-phone-open", "#groups")
	}
}
