package webtest

import (
	"strings"
	"testing"
	"time"
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
		"for i in range(300):\n    print('out %d' % i)\n    print('RLSCHED_METRIC {\"step\": %d, \"loss\": 0.5}' % i)\n"}})
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
	if got := b.text("#log-info"); !strings.Contains(got, "601 lines") {
		t.Errorf("log info %q; want the log's 601 lines whatever the view hides", got)
	}
}
