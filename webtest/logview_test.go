package webtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// TestLogHidesMetricLines: the run page's "Hide metric lines" leaves the
// RLSCHED_METRIC lines out of the view, keeps the log's line numbers and
// its find, remembers the choice, and shows them again when unticked.
func TestLogHidesMetricLines(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	a := s.api().signup("lena")
	id := a.submit(map[string]any{"name": "metrics", "command": []string{"python3", "-c",
		"for i in range(300):\n    print('out %d' % i)\n    print('RLSCHED_METRIC {\"step\": %d, \"loss\": 0.5}' % i)\nprint('long ' + 'x' * 600)\n"}})
	a.waitStatus(id, "SUCCEEDED", 60*time.Second)

	b := newBrowser(t)
	b.signIn(s.url, "lena")
	b.open(s.url + "/runs/" + id)
	b.wait("the whole log", 30*time.Second, `document.querySelector('#log-info') && document.querySelector('#log-info').dataset.state === 'eof'`)
	metricRows := `[...document.querySelectorAll('#log .ln .tx')].filter((e) => e.textContent.startsWith('RLSCHED_METRIC')).length`
	if n := eval[int](b, metricRows); n == 0 {
		t.Fatal("no metric line in view before hiding them")
	}
	b.click("#log-hide-metrics")
	b.wait("the metric lines hidden", 10*time.Second, metricRows+` === 0 && document.querySelectorAll('#log .ln').length > 0`)
	// Line numbers stay the log's: "out 299" is line 600 (after TRACE_ID).
	b.wait("the last output line at its number", 10*time.Second, `[...document.querySelectorAll('#log .ln')].some((e) => e.dataset.line === '600' && e.textContent.endsWith('out 299'))`)
	b.typeInto("#log-find", "out 7")
	eval[bool](b, `(() => { document.querySelector('#log-find').dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', bubbles: true})); return true; })()`)
	b.wait("the found line highlighted", 10*time.Second, `(() => { const e = document.querySelector('#log .ln.hl'); return !!e && e.textContent.endsWith('out 7'); })()`)
	b.screenshot("38-log-metrics-hidden")

	b.open(s.url + "/runs/" + id) // the choice is remembered
	b.wait("the log again, still without metric lines", 30*time.Second, `document.querySelector('#log-hide-metrics').checked && document.querySelector('#log-info').dataset.state === 'eof' && document.querySelectorAll('#log .ln').length > 0 && `+metricRows+` === 0`)
	b.click("#log-hide-metrics")
	b.wait("the metric lines back", 10*time.Second, metricRows+` > 0`)
	if got := b.text("#log-info"); !strings.Contains(got, "602 lines") {
		t.Errorf("log info %q; want the log's 602 lines whatever the view hides", got)
	}

	// Wrapping: the long line is one tall row and nothing scrolls sideways;
	// unwrapped it is one line high and the view scrolls sideways.
	longRow := `(() => { const r = [...document.querySelectorAll('#log .ln')].find((e) => e.textContent.includes('long xxx')); return r ? Math.round(r.getBoundingClientRect().height) : -1; })()`
	sideways := `(() => { const v = document.querySelector('#log .logview'); return v.scrollWidth > v.clientWidth + 1; })()`
	if eval[bool](b, `document.querySelector('#log-wrap').checked`) {
		t.Fatal("wrapping is on by default at desktop width")
	}
	b.do("to the end", chromedp.KeyEvent("End"))
	b.wait("the long line, unwrapped", 10*time.Second, longRow+` === 18 && `+sideways)
	b.click("#log-wrap")
	b.wait("the long line, wrapped", 10*time.Second, longRow+` > 36 && !`+sideways)
	b.screenshot("38b-log-wrapped")
	b.click("#log-wrap")
	b.wait("unwrapped again", 10*time.Second, longRow+` === 18`)
}

// TestRunsSkeleton: while the Runs list's first page is slow to come, the
// page shows placeholder rows, not "No runs yet"; the rows replace them.
func TestRunsSkeleton(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	a := s.api().signup("nina")
	id := a.submit(map[string]any{"name": "one", "command": []string{"true"}})
	b := newBrowser(t)
	b.signIn(s.url, "nina")
	b.open(s.url + "/sweeps") // away from the list, to come back to it slowly
	if _, err := chromedp.Call(b.ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(b.ctx, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{
		MatchedNetworkConditions: []*network.Conditions{{URLPattern: s.url + "/api/tasks?*", Latency: 2500, DownloadThroughput: -1, UploadThroughput: -1}}}); err != nil {
		t.Fatal(err)
	}
	b.click(`.mainnav a[href="/runs"]`)
	b.wait("the placeholder rows", 5*time.Second, `(() => { const sk = document.querySelector('#runs-skeleton'); const e = document.querySelector('#runs-table ~ .empty'); return !!sk && !sk.hidden && (!e || e.hidden); })()`)
	b.screenshot("39-runs-loading")
	b.wait("the run in place of them", 20*time.Second, fmt.Sprintf(`document.querySelector('#runs-table tr[data-id=%q]') !== null && document.querySelector('#runs-skeleton').hidden`, id))
}
