package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

// TestMaxQueuedPerUser (issue 25): no path queues a user's runs past
// MAX_QUEUED_PER_USER (submit, rerun, sweep); another user is not held by
// it, and a run that leaves the queue makes room.
func TestMaxQueuedPerUser(t *testing.T) {
	e := newEnvWith(t, func(c *Config) { c.MaxQueuedPerUser = 3 })
	tok, _ := e.user("alice")
	bobTok, _ := e.user("bob")
	first := e.submit(tok, `{"command":["x"]}`)
	e.submit(tok, `{"command":["x"]}`)
	refused := func(what string, r resp) {
		t.Helper()
		if r.status != http.StatusConflict || r.errCode(t) != codeConflict || !strings.Contains(string(r.body), "MAX_QUEUED_PER_USER") {
			t.Errorf("%s past the cap: %d %s, want 409 naming MAX_QUEUED_PER_USER", what, r.status, r.body)
		}
	}
	refused("a sweep of 2", e.req("POST", "/api/sweeps", tok, `{"base":{"command":["y"]},"grid":{"a":[1,2]}}`))
	e.submit(tok, `{"command":["x"]}`) // the third
	refused("a submission", e.req("POST", "/api/train", tok, `{"command":["x"]}`))
	refused("a rerun", e.req("POST", "/api/tasks/"+first+"/rerun", tok, nil))
	e.submit(bobTok, `{"command":["x"]}`)
	e.finish(first, core.StatusCancelled)
	e.submit(tok, `{"command":["x"]}`)
}
