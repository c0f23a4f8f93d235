package webtest

import (
	"testing"
	"time"
)

// TestGroupRunPage (issue 29): a multi-node group's run page says how many
// workers it spans.
func TestGroupRunPage(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, -1)
	a := s.api().signup("nell")
	id := a.submit(map[string]any{"name": "group", "command": []string{"sleep", "600"}, "nodes": 2})
	t.Cleanup(func() { a.cancel(id) })
	b := newBrowser(t)
	b.signIn(s.url, "nell")
	b.open(s.url + "/runs/" + id)
	b.wait("the run's nodes", 20*time.Second, `(() => { const e = document.querySelector('#run-nodes'); return e && e.textContent.startsWith('2 workers at once'); })()`)
}
