package webtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rlsched/rlsched/internal/testkit/fakesmi"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// chartTrainer logs three metrics every 3 steps: a reward that cannot
// exceed 0 (seeds reach 0 at different steps, so mean + std would pass it;
// a lower lr ends lower), a loss over four decades (for the log scale) and
// an entropy.
const chartTrainer = `
import json, math, os, random, time
p = json.loads(os.environ.get("RLSCHED_PARAMS") or "{}")
lr, seed = float(p.get("lr", 1)), int(p.get("seed", 0))
hard = 1.5 if p.get("env") == "hard" else 1.0
r = random.Random(seed)
for step in range(0, 300, 3):
    reward = -hard * max(0.0, 120 * math.exp(-step * lr / 60) + 24 / lr - 20 * r.random() - 8 * seed)
    loss = 10 ** (2 - 4 * step / 300 * lr ** 0.3) * (1 + 0.3 * r.random())
    print("RLSCHED_METRIC " + json.dumps({"step": step, "episode_reward": reward, "loss": loss, "entropy": 1 + 0.2 * r.random()}), flush=True)
print("FINAL_REWARD:%f" % reward)
time.sleep(float(p.get("sleep", 0)))
`

// TestCharts drives the chart features of issue 30 on a sweep of 3 learning
// rates × 2 tasks (env) × 3 seeds and on a GPU run (a fake nvidia-smi): the sweep page's
// smoothing, its band choice and its ±std bands clipped to the runs' range (never above 0
// for rewards ≤ 0), the compare page's small multiples (regex filter, group
// by a param), log scale, drag-to-zoom and reset, the tooltip beside the
// legend, the server's statistics (aggregate table, profiles, improvement
// matrix), the run page's edit of the record and its GPU series on a time
// axis; at 1400 px and on a 390 px phone (a tap's tooltip, a finger's
// zoom), with screenshots.
func TestCharts(t *testing.T) {
	needs(t)
	t.Parallel()
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(1, "Fake A100-SXM4-40GB")...)
	fake.SetUtil(0, 37)
	s := startUp(t, -1, "NVIDIA_SMI="+fake.Bin, "GPU_SAMPLE_SECONDS=1")
	a := s.api().signup("cara")
	st, body := a.do("POST", "/api/sweeps", map[string]any{"name": "lr curves", "project": "charts",
		"base": map[string]any{"command": []string{"python3", "-c", chartTrainer}}, "grid": map[string]any{"lr": []any{0.5, 1, 2}, "env": []any{"easy", "hard"}},
		"seedCount": 3})
	if st != 202 {
		t.Fatalf("POST /api/sweeps: %d %s", st, body)
	}
	var sw struct {
		ID   string   `json:"id"`
		Runs []string `json:"runs"`
	}
	if err := json.Unmarshal(body, &sw); err != nil || len(sw.Runs) != 18 {
		t.Fatalf("sweep answer %s: %v", body, err)
	}
	// A GPU run that lasts long enough for the worker's samples to reach
	// the master (sys/gpu_utilization, stepped by Unix seconds).
	gpuRun := a.submit(map[string]any{"name": "gpu run", "command": []string{"python3", "-c", chartTrainer}, "gpus": 1,
		"params": map[string]any{"sleep": 30}})
	testutil.Eventually(t, time.Minute, func() (bool, string) {
		var m struct {
			Series map[string][][2]float64 `json:"series"`
		}
		_, b := a.do("GET", "/api/tasks/"+gpuRun+"/metrics?names=sys/gpu_utilization", nil)
		_ = json.Unmarshal(b, &m)
		n := len(m.Series["sys/gpu_utilization"])
		return n >= 3, fmt.Sprintf("%d GPU samples of the run", n)
	})
	testutil.Eventually(t, 3*time.Minute, func() (bool, string) {
		var v struct {
			Counts map[string]int `json:"counts"`
		}
		_, b := a.do("GET", "/api/sweeps/"+sw.ID+"?runs=false", nil)
		_ = json.Unmarshal(b, &v)
		return v.Counts["SUCCEEDED"] == 18, fmt.Sprintf("counts %v", v.Counts)
	})

	// The test could fail: unclipped, some group's mean + std is above 0.
	var curves struct {
		Groups []struct {
			Series [][6]float64 `json:"series"`
		} `json:"groups"`
	}
	_, body = a.do("GET", "/api/sweeps/"+sw.ID+"/metrics", nil)
	if err := json.Unmarshal(body, &curves); err != nil {
		t.Fatal(err)
	}
	above := false
	for _, g := range curves.Groups {
		for _, p := range g.Series {
			above = above || p[1]+p[2] > 0
		}
	}
	if !above {
		t.Fatal("no group's mean + std passes 0: the clipping below proves nothing")
	}

	b := newBrowser(t)
	b.do("desktop viewport", chromedp.EmulateViewport(1400, 1000))
	b.signIn(s.url, "cara")

	// The sweep page: bands within the runs' range, smoothing, no log
	// scale for values ≤ 0, a tooltip that keeps off the legend.
	b.open(s.url + "/sweeps/" + sw.ID)
	b.wait("six bands", 20*time.Second, `document.querySelectorAll('[data-chart="sweep"] path.band').length === 6`)
	if his := eval[[]float64](b, `[...document.querySelectorAll('[data-chart="sweep"] path.band')].map((p) => Number(p.dataset.hi))`); len(his) != 6 || slices.Max(his) > 0 {
		t.Errorf("band tops %v: a band reaches above 0, which no run did", his)
	}
	if !eval[bool](b, `document.querySelector('[data-chart="sweep"] .chart-log').disabled`) {
		t.Error("the log scale is offered for rewards ≤ 0")
	}
	b.slide("#sweep-smooth", "0.8")
	b.wait("smoothed lines over faint raw ones", 5*time.Second, `location.search.includes('smooth=0.8') && document.querySelectorAll('[data-chart="sweep"] path.line.raw').length === 6`)
	hover(b, `[data-chart="sweep"]`, 0.5, 0.2)
	b.wait("the tooltip", 5*time.Second, `!document.querySelector('[data-chart="sweep"] .chart-tip').hidden`)
	if n := eval[int](b, `document.querySelectorAll('[data-chart="sweep"] .chart-tip .r').length`); n != 6 {
		t.Errorf("the tooltip lists %d series, want the 6 groups", n)
	}
	checkTipOffLegend(b, `[data-chart="sweep"]`)
	b.screenshot("30-sweep-charts")
	// The band's kind: min–max holds ± std (clipped to it), the 95% interval
	// of the mean is wider than ± std at 3 seeds (1.96/√3 of it), none draws
	// none; the choice in the link.
	// Measured by each band's area on screen (the shoelace formula over its
	// outline): the extremes of both are the runs' min and max.
	widths := `[...document.querySelectorAll('[data-chart="sweep"] path.band')].map((e) => {
		const p = e.getAttribute('d').slice(1).replace('Z', '').split('L').map((q) => q.split(',').map(Number));
		let a = 0; for (let i = 0; i < p.length; i++) { const j = (i + 1) % p.length; a += p[i][0] * p[j][1] - p[j][0] * p[i][1]; } return Math.abs(a / 2); })`
	std := eval[[]float64](b, widths)
	area := func(kind string) []float64 {
		b.selectValue("#sweep-band", kind)
		b.wait(kind+" bands", 5*time.Second, `location.search.includes('band=`+kind+`') && document.querySelectorAll('[data-chart="sweep"] path.band').length === 6`)
		return eval[[]float64](b, widths)
	}
	minmax, ci := area("minmax"), area("ci")
	for i := range std {
		if len(ci) != len(std) || len(minmax) != len(std) || !(minmax[i] > std[i]) || !(ci[i] > std[i]) {
			t.Errorf("the bands' areas: ± std %v, min–max %v, the interval %v", std, minmax, ci)
			break
		}
	}
	b.selectValue("#sweep-band", "none")
	b.wait("no bands", 5*time.Second, `location.search.includes('band=none') && document.querySelectorAll('[data-chart="sweep"] path.band').length === 0`)
	b.selectValue("#sweep-band", "std")
	b.wait("± std again", 5*time.Second, `!location.search.includes('band=') && document.querySelectorAll('[data-chart="sweep"] path.band').length === 6`)

	// The compare page over the sweep, grouped by lr: a chart per metric,
	// the statistics from /api/compare.
	b.open(s.url + "/compare?sweep=" + sw.ID + "&by=lr")
	b.wait("a chart per metric", 30*time.Second, `document.querySelectorAll('[data-chart^="compare:"]').length === 3 &&
		document.querySelectorAll('[data-chart="compare:episode_reward"] path.band').length === 3`)
	b.wait("the aggregate table", 30*time.Second, `document.querySelectorAll('#stats-table tr[data-group]').length === 3 &&
		document.querySelectorAll('[data-chart="profile"] path.line').length === 3 && document.querySelectorAll('#improve-matrix td.pi').length === 6`)
	// The two envs as the tasks: the bootstrap resamples within each.
	b.selectValue("#stats-task", "env")
	b.wait("the statistics over 2 tasks", 30*time.Second, `document.querySelector('#stats-table .stats-head').textContent.includes('18 runs over 2 tasks') &&
		document.querySelectorAll('#stats-table tr[data-group]').length === 3 && location.search.includes('task=env')`)
	iqm := b.text(`#stats-table tr[data-group] td[data-stat="iqm"]`)
	if !strings.Contains(iqm, "[") {
		t.Errorf("IQM cell %q has no interval", iqm)
	}
	if over := eval[bool](b, `(() => { const e = document.querySelector('#params-diff'); return e.scrollWidth > e.clientWidth + 1; })()`); over {
		t.Error("the runs table scrolls sideways")
	}
	t.Logf("compare page: load %s ms, draw %s ms", eval[string](b, `document.querySelector('#compare-charts').dataset.loadMs`), eval[string](b, `document.querySelector('#compare-charts').dataset.drawMs`))
	// The exports: a chart as a standalone SVG (styles written in) and as
	// CSV rows, as the Export menu downloads them.
	svg := evalAwait[string](b, `import('/static/js/chartexport.js').then((m) => m.svgText(document.querySelector('[data-chart="profile"] svg')))`)
	if !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, `xmlns="http://www.w3.org/2000/svg"`) || strings.Count(svg, "class=\"line\"") != 3 || !strings.Contains(svg, "stroke-width=") {
		t.Errorf("the profile's SVG export: %.300s", svg)
	}
	// The PNG is that SVG drawn as an image, which the page's policy allows.
	if w := evalAwait[int](b, `import('/static/js/chartexport.js').then((m) => new Promise((r) => { const i = new Image(); i.onload = () => r(i.width); i.onerror = () => r(-1);
		i.src = 'data:image/svg+xml;charset=utf-8,' + encodeURIComponent(m.svgText(document.querySelector('[data-chart="profile"] svg'))); }))`); w <= 0 {
		t.Errorf("the SVG export does not load as an image (width %d), so no PNG can be drawn", w)
	}
	csv := evalAwait[string](b, `import('/static/js/chartexport.js').then((m) => m.csvText([['a', 'b,c'], [1, 'x"y']]))`)
	if csv != "a,\"b,c\"\n1,\"x\"\"y\"\n" {
		t.Errorf("CSV export %q", csv)
	}
	b.typeInto("#metric-filter", "reward|loss")
	b.wait("two charts matching the filter", 5*time.Second, `document.querySelectorAll('[data-chart^="compare:"]').length === 2 && location.search.includes('metrics=')`)
	// Log scale on the loss: decades as ticks.
	b.click(`[data-chart="compare:loss"] .chart-log`)
	b.wait("the loss on a log scale", 5*time.Second, `document.querySelector('[data-chart="compare:loss"] svg').dataset.ylog === '1' && location.search.includes('log=loss')`)
	ticks := eval[[]string](b, `[...document.querySelectorAll('[data-chart="compare:loss"] .axis text')].map((e) => e.textContent)`)
	if !contains(ticks, "0.1") || !contains(ticks, "100") {
		t.Errorf("log ticks %q, want decades such as 0.1 and 100", ticks)
	}
	// Drag to zoom, double-click to reset.
	drag(b, `[data-chart="compare:loss"]`, 0.3, 0.6)
	b.wait("a zoom", 5*time.Second, `document.querySelector('[data-chart="compare:loss"] svg').dataset.zoom !== '' && !document.querySelector('[data-chart="compare:loss"] .chart-reset').hidden`)
	b.screenshot("31-compare-zoomed")
	b.do("double-click", chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-chart="compare:loss"] svg').dispatchEvent(new MouseEvent('dblclick', {bubbles: true}))`))
	b.wait("the zoom reset", 5*time.Second, `document.querySelector('[data-chart="compare:loss"] svg').dataset.zoom === '' && document.querySelector('[data-chart="compare:loss"] .chart-reset').hidden`)
	hover(b, `[data-chart="compare:episode_reward"]`, 0.7, 0.5)
	b.wait("the tooltip", 5*time.Second, `!document.querySelector('[data-chart="compare:episode_reward"] .chart-tip').hidden`)
	checkTipOffLegend(b, `[data-chart="compare:episode_reward"]`)
	b.screenshot("32-compare-sweep")

	// The run page: the record edited; the GPU series on a time axis.
	b.open(s.url + "/runs/" + gpuRun)
	b.wait("the GPU series", 30*time.Second, `document.querySelector('[data-chart="sys/gpu_utilization"] path.line') !== null && document.querySelector('#edit-record') !== null`)
	if l := b.text(`[data-chart="sys/gpu_utilization"] .axis-label`); l != "time since start" {
		t.Errorf("the GPU chart's x axis is %q, want time since start", l)
	}
	if l := b.text(`[data-chart="episode_reward"] .axis-label`); l != "step" {
		t.Errorf("the reward chart's x axis is %q, want step", l)
	}
	b.selectValue(`[data-chart="sys/gpu_utilization"] select.chart-x`, "wall")
	b.wait("wall time", 5*time.Second, `document.querySelector('[data-chart="sys/gpu_utilization"] .axis-label').textContent === 'wall time'`)
	b.click("#edit-record")
	b.typeInto("#edit-name", "gpu baseline")
	b.typeInto("#edit-tags", "paper, fig-2")
	b.typeInto("#edit-note", "the reference run")
	b.click("#edit-baseline")
	b.click("#edit-save")
	b.wait("the edited record", 10*time.Second, `document.querySelector('#run-name').textContent === 'gpu baseline' && document.querySelector('#run-baseline') !== null &&
		(document.querySelector('#run-note') || {}).textContent === 'Note: the reference run'`)
	var rec struct {
		Name     string   `json:"name"`
		Tags     []string `json:"tags"`
		Note     string   `json:"note"`
		Baseline bool     `json:"baseline"`
	}
	_, body = a.do("GET", "/api/tasks/"+gpuRun, nil)
	if err := json.Unmarshal(body, &rec); err != nil || rec.Name != "gpu baseline" || strings.Join(rec.Tags, ",") != "paper,fig-2" || rec.Note != "the reference run" || !rec.Baseline {
		t.Errorf("the stored record %+v, %v", rec, err)
	}
	b.screenshot("33-run-record-gpu-time")
	// Found again by the record: baselines only, a part of the note.
	b.open(s.url + "/runs?isBaseline=true")
	b.wait("the one baseline", 15*time.Second, fmt.Sprintf(`document.querySelectorAll('#runs-table tbody tr[data-id]').length === 1 &&
		document.querySelector('#runs-table tr[data-id=%q] .tag.baseline') !== null && document.querySelector('#filter-baseline').checked`, gpuRun))
	b.click("#filter-baseline")
	b.typeInto("#filter-note", "REFERENCE")
	b.wait("the run by its note", 15*time.Second, fmt.Sprintf(`location.search.includes('note=REFERENCE') && !location.search.includes('isBaseline') &&
		document.querySelectorAll('#runs-table tbody tr[data-id]').length === 1 && document.querySelector('#runs-table tr[data-id=%q] .run-note-line') !== null`, gpuRun))
	b.screenshot("33b-runs-by-note")

	// A phone: nothing scrolls sideways; the runs table is a card a run.
	b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	b.open(s.url + "/compare?sweep=" + sw.ID + "&by=lr")
	b.wait("the charts and statistics", 30*time.Second, `document.querySelectorAll('[data-chart^="compare:"]').length === 3 && document.querySelectorAll('#stats-table tr[data-group]').length === 3`)
	if over := eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`); over {
		t.Error("the compare page scrolls sideways on a phone")
	}
	if over := eval[bool](b, `(() => { const e = document.querySelector('#params-diff'); return e.scrollWidth > e.clientWidth + 1; })()`); over {
		t.Error("the runs table scrolls sideways on a phone")
	}
	// A finger: a tap shows the tooltip, a sideways drag zooms, Reset undoes.
	touch(b, `[data-chart="compare:episode_reward"]`, 0.5, 0.5)
	b.wait("the tooltip of a tap", 5*time.Second, `!document.querySelector('[data-chart="compare:episode_reward"] .chart-tip').hidden &&
		document.querySelector('[data-chart="compare:episode_reward"] svg').dataset.zoom === ''`)
	checkTipOffLegend(b, `[data-chart="compare:episode_reward"]`)
	b.screenshot("34-compare-phone")
	touch(b, `[data-chart="compare:episode_reward"]`, 0.3, 0.7)
	b.wait("a zoom by touch", 5*time.Second, `document.querySelector('[data-chart="compare:episode_reward"] svg').dataset.zoom !== '' &&
		!document.querySelector('[data-chart="compare:episode_reward"] .chart-reset').hidden`)
	b.screenshot("34b-compare-phone-touch-zoom")
	b.click(`[data-chart="compare:episode_reward"] .chart-reset`)
	b.wait("the zoom reset", 5*time.Second, `document.querySelector('[data-chart="compare:episode_reward"] svg').dataset.zoom === ''`)
	b.open(s.url + "/sweeps/" + sw.ID + "?smooth=0.8")
	b.wait("six bands", 20*time.Second, `document.querySelectorAll('[data-chart="sweep"] path.band').length === 6`)
	if over := eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`); over {
		t.Error("the sweep page scrolls sideways on a phone")
	}
	b.screenshot("35-sweep-phone")
	b.open(s.url + "/runs/" + gpuRun)
	b.wait("the GPU series", 30*time.Second, `document.querySelector('[data-chart="sys/gpu_utilization"] path.line') !== null`)
	if over := eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`); over {
		t.Error("the run page scrolls sideways on a phone")
	}
	b.screenshot("36-run-phone")
}

// evalAwait is eval of a promise: its resolved value.
func evalAwait[T any](b *browser, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		b.fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// hover moves the mouse over the chart's plot at fractions fx, fy of it.
func hover(b *browser, chart string, fx, fy float64) {
	b.t.Helper()
	q, _ := json.Marshal(chart + " svg")
	b.do("hover "+chart, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const s = document.querySelector(%s); const r = s.getBoundingClientRect();
		s.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: r.left + r.width * %g, clientY: r.top + r.height * %g})); })()`, q, fx, fy)))
}

// drag presses the mouse at fraction x0 of the chart's width and lets go at x1.
func drag(b *browser, chart string, x0, x1 float64) {
	b.t.Helper()
	q, _ := json.Marshal(chart + " svg")
	b.do("drag on "+chart, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const s = document.querySelector(%s); const r = s.getBoundingClientRect();
		const at = (f) => ({bubbles: true, button: 0, clientX: r.left + r.width * f, clientY: r.top + r.height / 2});
		s.dispatchEvent(new MouseEvent('mousedown', at(%g)));
		s.dispatchEvent(new MouseEvent('mousemove', at(%g)));
		s.dispatchEvent(new MouseEvent('mouseup', at(%g))); })()`, q, x0, (x0+x1)/2, x1)))
}

// touch puts a finger on the chart's plot at fraction x0 of its width and
// lifts it at x1 (x0 == x1: a tap).
func touch(b *browser, chart string, x0, x1 float64) {
	b.t.Helper()
	q, _ := json.Marshal(chart + " svg")
	b.do("touch on "+chart, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const s = document.querySelector(%s); const r = s.getBoundingClientRect();
		const at = (f) => new Touch({identifier: 1, target: s, clientX: r.left + r.width * f, clientY: r.top + r.height / 2});
		const send = (type, t, touches) => s.dispatchEvent(new TouchEvent(type, {bubbles: true, cancelable: true, touches, changedTouches: [t]}));
		let t = at(%g); send('touchstart', t, [t]);
		t = at(%g); send('touchmove', t, [t]);
		t = at(%g); send('touchend', t, []); })()`, q, x0, (x0+x1)/2, x1)))
}

// checkTipOffLegend: the chart's tooltip does not overlap its legend.
func checkTipOffLegend(b *browser, chart string) {
	b.t.Helper()
	q, _ := json.Marshal(chart)
	overlap := eval[bool](b, fmt.Sprintf(`(() => { const c = document.querySelector(%s); const t = c.querySelector('.chart-tip').getBoundingClientRect();
		const l = c.querySelector('.legend'); if (l.hidden) return false; const g = l.getBoundingClientRect();
		return t.bottom > g.top && t.top < g.bottom && t.right > g.left && t.left < g.right; })()`, q))
	if overlap {
		b.t.Errorf("the tooltip of %s covers its legend", chart)
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// speedTrainer logs six metrics at 500 steps.
const speedTrainer = `
import json, math, os
p = json.loads(os.environ.get("RLSCHED_PARAMS") or "{}")
lr, seed = float(p.get("lr", 1)), int(p.get("seed", 0))
lines = []
for step in range(500):
    m = {"step": step}
    for k in range(6):
        m["m%d" % k] = math.sin(step / 40 + k + seed) * lr + step * 0.01 * k
    lines.append("RLSCHED_METRIC " + json.dumps(m))
print("\n".join(lines), flush=True)
`

// TestComparePageSpeed: the compare page with 50 runs × 6 metrics (500
// points each) draws in at most 1 s (issue 30's goal), measured by the
// page around its drawing (the fetches apart); its legend of 50 filters.
func TestComparePageSpeed(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	a := s.api().signup("pia")
	swID := a.sweepDone(map[string]any{"name": "fifty", "base": map[string]any{"command": []string{"python3", "-c", speedTrainer}},
		"grid": map[string]any{"lr": []any{0.5, 1, 2, 3, 4}}, "seedCount": 10}, 50, 4*time.Minute)
	b := newBrowser(t)
	b.do("desktop viewport", chromedp.EmulateViewport(1400, 1000))
	b.signIn(s.url, "pia")
	// The best of three loads: a draw is a few hundred ms of one core, and
	// on a loaded CI machine another package's burst can double one of them
	// (1.8 s seen once beside seven builds); three in a row that slow are the
	// page, not the machine.
	best := 0
	for try := 1; try <= 3 && (best == 0 || best > 1000); try++ {
		b.open(s.url + "/compare?sweep=" + swID)
		b.wait("6 charts of 50 lines", 60*time.Second, `document.querySelectorAll('[data-chart^="compare:"]').length === 6 &&
		[...document.querySelectorAll('[data-chart^="compare:"]')].every((c) => c.querySelectorAll('path.line[data-points="500"]').length === 50) &&
		document.querySelector('#compare-charts').dataset.drawMs !== undefined`)
		draw := eval[int](b, `Number(document.querySelector('#compare-charts').dataset.drawMs)`)
		t.Logf("50 runs × 6 metrics, load %d: fetched in %s ms, drawn in %d ms", try, eval[string](b, `document.querySelector('#compare-charts').dataset.loadMs`), draw)
		if best == 0 || draw < best {
			best = draw
		}
	}
	if best > 1000 {
		t.Errorf("the compare page drew 50 runs × 6 metrics in %d ms at best of three, want ≤ 1000", best)
	}
	b.screenshot("37-compare-fifty")
	// The legend filters: a regex over the labels leaves the series it
	// matches; a click on an entry hides its series.
	const m0 = `[data-chart="compare:m0"]`
	first := eval[[]string](b, `(() => { const e = document.querySelector('`+m0+` .legend button[data-series]'); return [e.dataset.series, e.querySelector('.lbl').textContent]; })()`)
	filter, _ := json.Marshal("^" + regexp.QuoteMeta(first[1]) + "$")
	b.do("filter the legend", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const f = document.querySelector('%s .legend-filter'); f.value = %s; f.dispatchEvent(new Event('input', {bubbles: true})); })()`, m0, filter)))
	b.wait("the one series the filter matches", 5*time.Second, fmt.Sprintf(`(() => { const l = document.querySelectorAll('%s path.line:not(.raw)'); return l.length === 1 && l[0].dataset.series === %q; })()`, m0, first[0]))
	b.do("clear the filter", chromedp.Evaluate[chromedp.Void](`(() => { const f = document.querySelector('`+m0+` .legend-filter'); f.value = ''; f.dispatchEvent(new Event('input', {bubbles: true})); })()`))
	b.wait("every series again", 5*time.Second, `document.querySelectorAll('`+m0+` path.line:not(.raw)').length === 50`)
	b.click(m0 + ` .legend button[data-series]`)
	b.wait("the clicked series hidden", 5*time.Second, fmt.Sprintf(`document.querySelectorAll('%s path.line:not(.raw)').length === 49 && !document.querySelector('%s path.line[data-series=%q]') &&
		document.querySelector('%s .legend button[data-series]').getAttribute('aria-pressed') === 'false'`, m0, m0, first[0], m0))
}

// doneTrainer logs one score: higher for a higher lr, each env apart.
const doneTrainer = `
import json, os, random
p = json.loads(os.environ.get("RLSCHED_PARAMS") or "{}")
r = random.Random(int(p["seed"]) * 7 + ord(p["env"]))
score = float(p["lr"]) * 10 + {"a": 0, "b": 1, "c": 2}[p["env"]] + 3 * r.random()
print("RLSCHED_METRIC " + json.dumps({"step": 1, "episode_reward": score}), flush=True)
`

// TestCompareDoneWhen is issue 30's done-when in the dashboard: a sweep of
// 4 learning rates × 10 seeds on 3 tasks shows the aggregate table (every
// estimate with its interval), the performance profile and the 4 × 4
// improvement matrix, each number the server's (which httpapi's
// TestCompare_PythonClient holds to the numpy reference), the tables
// exported as CSV, SVG and PNG.
func TestCompareDoneWhen(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	a := s.api().signup("dora")
	swID := a.sweepDone(map[string]any{"name": "done when", "base": map[string]any{"command": []string{"python3", "-c", doneTrainer}},
		"grid": map[string]any{"lr": []any{0.1, 0.2, 0.3, 0.4}, "env": []any{"a", "b", "c"}}, "seedCount": 10}, 120, 6*time.Minute)
	b := newBrowser(t)
	b.do("desktop viewport", chromedp.EmulateViewport(1400, 1000))
	b.signIn(s.url, "dora")
	b.open(s.url + "/compare?sweep=" + swID + "&by=lr&task=env")
	b.wait("the statistics", 60*time.Second, `(document.querySelector('#stats-table .stats-head') || {textContent: ''}).textContent.includes('120 runs over 3 tasks') &&
		document.querySelectorAll('#stats-table tr[data-group]').length === 4 && document.querySelectorAll('[data-chart="profile"] path.line').length === 4 &&
		document.querySelectorAll('#improve-matrix td.pi').length === 12`)
	// The page's own request, asked again: its cells show that answer.
	q := eval[string](b, `performance.getEntriesByType('resource').map((e) => e.name).filter((n) => n.includes('/api/compare?')).pop()`)
	i := strings.Index(q, "/api/compare?")
	if i < 0 {
		t.Fatalf("the page's request %q", q)
	}
	var ans struct {
		Groups []struct {
			Name  string `json:"name"`
			N     int    `json:"n"`
			Stats map[string]struct {
				Value float64    `json:"value"`
				CI    [2]float64 `json:"ci"`
			} `json:"stats"`
			Profile [][4]float64 `json:"profile"`
		} `json:"groups"`
		Improvements []struct {
			A, B  string
			Value float64    `json:"value"`
			CI    [2]float64 `json:"ci"`
		} `json:"improvements"`
	}
	if st, body := a.do("GET", q[i:], nil); st != 200 || json.Unmarshal(body, &ans) != nil || len(ans.Groups) != 4 || len(ans.Improvements) != 12 {
		t.Fatalf("%s: %d %s", q[i:], st, body)
	}
	// A cell "v [lo, hi]" (4 significant digits, the matrix's 3) near the answer.
	near := func(what, cell string, want ...float64) {
		t.Helper()
		f := strings.FieldsFunc(cell, func(r rune) bool { return r == ' ' || r == '[' || r == ']' || r == ',' })
		ok := len(f) == len(want)
		for k := 0; ok && k < len(f); k++ {
			var v float64
			_, err := fmt.Sscan(f[k], &v)
			ok = err == nil && math.Abs(v-want[k]) <= 1e-3*math.Max(1, math.Abs(want[k]))
		}
		if !ok {
			t.Errorf("%s: the page shows %q, the server %v", what, cell, want)
		}
	}
	for _, g := range ans.Groups {
		if g.N != 30 {
			t.Errorf("group %s: %d runs", g.Name, g.N)
		}
		for _, stat := range []string{"iqm", "mean", "median", "gap"} {
			iv := g.Stats[stat]
			near("group "+g.Name+" "+stat, b.text(fmt.Sprintf(`#stats-table tr[data-group=%q] td[data-stat=%q]`, g.Name, stat)), iv.Value, iv.CI[0], iv.CI[1])
		}
	}
	for _, im := range ans.Improvements {
		near("P("+im.A+" > "+im.B+")", b.text(fmt.Sprintf(`#improve-matrix td.pi[data-a=%q][data-b=%q]`, im.A, im.B)), im.Value, im.CI[0], im.CI[1])
	}
	// The profile's lines are the answer's fractions.
	got := eval[[]int](b, `[...document.querySelectorAll('[data-chart="profile"] path.line')].map((p) => Number(p.dataset.points))`)
	if len(got) != 4 || got[0] != len(ans.Groups[0].Profile) || len(ans.Groups[0].Profile) < 2 {
		t.Errorf("profile lines of %v points, the answer's %d", got, len(ans.Groups[0].Profile))
	}
	// Each statistics table exports as CSV, SVG and PNG: the files its
	// buttons hand to the browser.
	exported := func(button string) string {
		q, _ := json.Marshal(button)
		return evalAwait[string](b, fmt.Sprintf(`new Promise((r) => { const orig = URL.createObjectURL;
			URL.createObjectURL = (blob) => { URL.createObjectURL = orig; (blob.type === 'image/png' ? Promise.resolve('PNG ' + blob.size) : blob.text()).then(r); return orig.call(URL, blob); };
			document.querySelector(%s).click(); })`, q))
	}
	if csv := exported("#stats-csv"); !strings.HasPrefix(csv, "group,runs,iqm,iqm_lo,iqm_hi,") || strings.Count(csv, "\n") != 5 {
		t.Errorf("the aggregate table's CSV:\n%s", csv)
	}
	if svg := exported("#stats-svg"); !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, ">Optimality gap</text>") ||
		!strings.Contains(svg, ">"+b.text(`#stats-table tr[data-group="0.4"] td[data-stat="iqm"]`)+"</text>") {
		t.Errorf("the aggregate table's SVG: %.400s", svg)
	}
	svg := exported("#improve-svg")
	if strings.Count(svg, "<rect") < 12 || !strings.Contains(svg, ">"+b.text(`#improve-matrix td.pi[data-a="0.4"][data-b="0.1"]`)+"</text>") {
		t.Errorf("the improvement matrix's SVG: %.400s", svg)
	}
	if err := os.WriteFile(filepath.Join(screenshotDir, "39-improvement-matrix.svg"), []byte(svg), 0o644); err != nil {
		t.Log(err)
	}
	for _, png := range []string{"#stats-png", "#improve-png"} {
		if got := exported(png); !strings.HasPrefix(got, "PNG ") || got == "PNG 0" {
			t.Errorf("%s gave %q", png, got)
		}
	}
	// A run's one point is a ring, its group's band a bar: visible.
	if n := eval[int](b, `document.querySelectorAll('[data-chart="compare:episode_reward"] path.line[data-points="1"]').length +
		10 * document.querySelectorAll('[data-chart="compare:episode_reward"] path.band').length`); n != 44 {
		t.Errorf("the one-step chart draws %d lines and %d bands, want 4 of each", n%10, n/10)
	}
	b.screenshot("38-compare-done-when")

	// The tasks as tags (suite:VALUE, added by an edit of each record): the
	// page offers tag suite as the task, and its statistics are the env's.
	var sweepRuns struct {
		Runs []struct {
			ID     string          `json:"id"`
			Params json.RawMessage `json:"params"`
		} `json:"runs"`
	}
	if _, body := a.do("GET", "/api/sweeps/"+swID, nil); json.Unmarshal(body, &sweepRuns) != nil || len(sweepRuns.Runs) != 120 {
		t.Fatalf("the sweep's runs: %s", body)
	}
	for _, r := range sweepRuns.Runs {
		var p struct{ Env string }
		_ = json.Unmarshal(r.Params, &p)
		if st, body := a.do("PATCH", "/api/tasks/"+r.ID, map[string]any{"addTags": []string{"suite:" + p.Env}}); st != 200 {
			t.Fatalf("PATCH %s: %d %s", r.ID, st, body)
		}
	}
	envIQM := b.text(`#stats-table tr[data-group="0.4"] td[data-stat="iqm"]`)
	b.open(s.url + "/compare?sweep=" + swID + "&by=lr&task=tag.suite")
	b.wait("the statistics over the tag's tasks", 60*time.Second, `document.querySelector('#stats-task').value === 'tag.suite' &&
		(document.querySelector('#stats-table .stats-head') || {textContent: ''}).textContent.includes('120 runs over 3 tasks') &&
		document.querySelectorAll('#stats-table tr[data-group]').length === 4`)
	if got := b.text(`#stats-table tr[data-group="0.4"] td[data-stat="iqm"]`); got != envIQM {
		t.Errorf("IQM of lr 0.4 over tag suite %q, over param env %q", got, envIQM)
	}
}
