package webtest

import (
	"testing"
	"time"
)

// TestRunPagePythonEnv (issue 27): the run page says which Python
// environment the run asked for.
func TestRunPagePythonEnv(t *testing.T) {
	s := startUp(t, 0)
	a := s.api().signup("pia") // the first user: an admin
	id := a.submit(map[string]any{"name": "env-run", "command": []string{"python", "-c", "print(1)"},
		"python": map[string]string{"venv": "/nonexistent/env"}})
	b := newBrowser(t)
	b.signIn(s.url, "pia")
	b.open(s.url + "/runs/" + id)
	b.wait("the run's python env", 20*time.Second, `(() => { const e = document.querySelector('#run-python'); return e && e.textContent === 'venv /nonexistent/env'; })()`)
}
