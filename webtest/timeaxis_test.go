package webtest

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// timedTrainer logs steps 0 and 1 at once and steps 2 and 3 three seconds
// later: evenly spaced by step, bunched in pairs by time.
const timedTrainer = `
import json, time
for step in range(4):
    if step == 2:
        time.sleep(3)
    print("RLSCHED_METRIC " + json.dumps({"step": step, "episode_reward": step * 10.0}), flush=True)
`

// TestRunChartTimeAxis (issue 30): a logged metric's chart offers step,
// relative and wall time once the master has its points' times; the choice
// moves the points to where their times put them, relabels the axis, and
// is kept in the URL (a reload opens on it).
func TestRunChartTimeAxis(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, -1)
	a := s.api().signup("tina")
	id := a.submit(map[string]any{"name": "timed", "command": []string{"python3", "-c", timedTrainer}})
	a.waitStatus(id, "SUCCEEDED", 2*time.Minute)
	later := a.submit(map[string]any{"name": "timed later", "command": []string{"python3", "-c", timedTrainer}})
	a.waitStatus(later, "SUCCEEDED", 2*time.Minute)

	b := newBrowser(t)
	b.do("desktop viewport", chromedp.EmulateViewport(1200, 900))
	b.signIn(s.url, "tina")
	const chart = `[data-chart="episode_reward"]`
	b.open(s.url + "/runs/" + id + "?smooth=0")
	b.wait("the time modes offered", 30*time.Second, `[...document.querySelectorAll('`+chart+` select.chart-x option')].map((o) => o.value).join() === 'step,relative,wall'`)
	// xs are the line's points across the plot, 0 (first) to 1 (last).
	xs := func() []float64 {
		t.Helper()
		d := eval[string](b, `document.querySelector('`+chart+` path.line:not(.raw)').getAttribute('d')`)
		var v []float64
		for _, m := range regexp.MustCompile(`[ML]([-\d.]+),`).FindAllStringSubmatch(d, -1) {
			f, _ := strconv.ParseFloat(m[1], 64)
			v = append(v, f)
		}
		if len(v) != 4 {
			t.Fatalf("line %q: want 4 points", d)
		}
		for i := range v {
			v[i] = (v[i] - v[0]) / (v[3] - v[0])
		}
		return v
	}
	if l := b.text(chart + ` .axis-label`); l != "step" {
		t.Errorf("x axis %q, want step", l)
	}
	if v := xs(); v[1] < 0.3 || v[1] > 0.37 || v[2] < 0.63 || v[2] > 0.7 {
		t.Errorf("by step, the points at %v, want thirds", v)
	}
	b.screenshot("37-run-x-step")
	b.selectValue(chart+` select.chart-x`, "relative")
	b.wait("time since start", 5*time.Second, `document.querySelector('`+chart+` .axis-label').textContent === 'time since start' && location.search.includes('x=relative')`)
	// Steps 0 and 1 came together, 2 and 3 three seconds later.
	if v := xs(); v[1] > 0.15 || v[2] < 0.85 {
		t.Errorf("by time, the points at %v, want two pairs at the ends", v)
	}
	ticks := eval[[]string](b, `[...document.querySelectorAll('`+chart+` .axis text')].map((e) => e.textContent)`)
	durations := 0
	for _, tk := range ticks {
		if regexp.MustCompile(`^\d+s$`).MatchString(tk) {
			durations++
		}
	}
	if durations < 2 {
		t.Errorf("ticks %q: want durations such as 2s", ticks)
	}
	b.screenshot("38-run-x-relative")
	b.selectValue(chart+` select.chart-x`, "wall")
	b.wait("wall time", 5*time.Second, `document.querySelector('`+chart+` .axis-label').textContent === 'wall time' && location.search.includes('x=wall')`)
	b.screenshot("39-run-x-wall")
	// The URL's choice opens the page on it.
	b.open(s.url + "/runs/" + id + "?x=relative")
	b.wait("relative time from the URL", 30*time.Second, fmt.Sprintf(`(document.querySelector('%s .axis-label') || {}).textContent === 'time since start' && document.querySelector('%s select.chart-x').value === 'relative'`, chart, chart))
	b.selectValue(chart+` select.chart-x`, "step")
	b.wait("step again", 5*time.Second, `document.querySelector('`+chart+` .axis-label').textContent === 'step' && !location.search.includes('x=')`)

	// Compare: relative time is each run's own since its start, so the two
	// runs overlap; on the wall clock the later one starts after the first
	// ended.
	const cmp = `[data-chart="compare:episode_reward"]`
	ends := func(run string) [2]float64 {
		t.Helper()
		d := eval[string](b, fmt.Sprintf(`document.querySelector('%s path.line:not(.raw)[data-series=%q]').getAttribute('d')`, cmp, run))
		ms := regexp.MustCompile(`[ML]([-\d.]+),`).FindAllStringSubmatch(d, -1)
		if len(ms) != 4 {
			t.Fatalf("line of %s %q: want 4 points", run, d)
		}
		first, _ := strconv.ParseFloat(ms[0][1], 64)
		last, _ := strconv.ParseFloat(ms[3][1], 64)
		return [2]float64{first, last}
	}
	b.open(s.url + "/compare?ids=" + id + "," + later + "&x=relative")
	b.wait("two runs on relative time", 30*time.Second, fmt.Sprintf(`document.querySelectorAll('%s path.line:not(.raw)').length === 2 && document.querySelector('%s .axis-label').textContent === 'time since start'`, cmp, cmp))
	// (Each run's first line comes when its python has started: the two
	// starts differ by that, so overlap is what is asked, not equal ends.)
	if e1, e2 := ends(id), ends(later); !(e2[0] < e1[1] && e1[0] < e2[1]) {
		t.Errorf("relative time: the runs span %v and %v px, want them overlapping", e1, e2)
	}
	b.screenshot("40-compare-x-relative")
	b.selectValue(cmp+` select.chart-x`, "wall")
	b.wait("wall time", 5*time.Second, fmt.Sprintf(`document.querySelector('%s .axis-label').textContent === 'wall time' && location.search.includes('x=wall')`, cmp))
	if e1, e2 := ends(id), ends(later); !(e2[0] > e1[1]) {
		t.Errorf("wall time: the runs span %v and %v px, want the later one after the first", e1, e2)
	}
	b.screenshot("41-compare-x-wall")
}
