package webtest

import (
	"strings"
	"testing"
	"time"
)

// TestFailedRunSaysWhy: a run that fails shows the end of its log on its
// page (errorTail), as the API has it, without the metric lines.
func TestFailedRunSaysWhy(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	a := s.api().signup("erin")
	script := `echo loading; echo 'RLSCHED_METRIC {"step": 1, "r": 2}'; echo "ModuleNotFoundError: No module named 'gym'" >&2; exit 3`
	id := a.submit(map[string]any{"name": "broken", "command": []string{"sh", "-c", script}})
	a.waitStatus(id, "FAILED", 60*time.Second)
	// The tail ends with the worker's sentence on the missing module, which
	// is the run's error too.
	const why = "[rlsched] the run's Python cannot import gym (ModuleNotFoundError)"
	if task := a.task(id); !strings.HasPrefix(task.ErrorTail, "loading\nModuleNotFoundError: No module named 'gym'\n"+why) {
		t.Errorf("the API's errorTail is %q", task.ErrorTail)
	}

	b := newBrowser(t)
	b.signIn(s.url, "erin")
	b.open(s.url + "/runs/" + id)
	b.wait("the end of the log", 15*time.Second, `(() => { const e = document.querySelector('#error-tail pre'); return e && e.textContent.includes('No module named'); })()`)
	if txt := b.text("#error-tail pre"); strings.Contains(txt, "RLSCHED_METRIC") {
		t.Errorf("the page's error tail shows metric lines: %q", txt)
	}
	b.screenshot("run-failed-error-tail")
}
