package webtest

import (
	"testing"
	"time"
)

// TestResumeMarker: a preempted run's second attempt starts its metrics
// again; the run page's chart marks the step where it did (issue 32: the
// reward chart had no marker where a resume happened). The mark comes
// from the master, which read the attempt's output from its start, not
// from the part of the log the page read: here the log reaches its cap
// (RUN_MAX_LOG_BYTES) in attempt 1, so attempt 2's marker line and output
// are not in it at all.
func TestResumeMarker(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 1, "RUN_MAX_LOG_BYTES=4096")
	root := s.api().signup("root")
	alice := s.api().signup("alice")
	script := `for i in 1 2 3 4 5; do echo "RLSCHED_METRIC {\"step\": $i, \"r\": $i}"; done; head -c 8000 /dev/zero | tr '\0' x; echo; sleep 600`
	victim := alice.submit(map[string]any{"name": "resumable", "command": []string{"sh", "-c", script}, "gpus": 1, "preemptible": true})
	t.Cleanup(func() { alice.cancel(victim) })
	alice.waitStatus(victim, "RUNNING", 60*time.Second)
	root.submit(map[string]any{"name": "urgent", "command": []string{"sleep", "1"}, "gpus": 1, "priority": 5})

	b := newBrowser(t)
	b.signIn(s.url, "alice")
	b.open(s.url + "/runs/" + victim)
	b.wait("the second attempt's mark on the chart", 90*time.Second,
		`(() => { const m = document.querySelector('[data-chart="r"] svg .mark[data-step="1"]'); return !!m && m.textContent === 'attempt 2'; })()`)
	if eval[bool](b, `document.querySelector('#log').textContent.includes('=== rlsched attempt 2')`) {
		t.Error("attempt 2's marker is in the capped log; the test shows nothing")
	}
	if n := eval[int](b, `document.querySelectorAll('[data-chart="rlsched/resume"]').length`); n != 0 {
		t.Errorf("the resume series is drawn as %d charts, want none", n)
	}
	b.screenshot("33-run-resumed")
}
