package httpapi

import (
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

// TestWorkerAdmin: admins drain, resume and forget workers; a user may not;
// a worker not DOWN cannot be forgotten; bad and unknown ids are 400 and 404.
func TestWorkerAdmin(t *testing.T) {
	e := newEnv(t)
	root, _ := e.user("root")
	alice, _ := e.user("alice")
	e.ctl.mu.Lock()
	e.ctl.workers = []core.WorkerInfo{{ID: "w1", State: core.WorkerIdle}, {ID: "w2", State: core.WorkerDown}}
	e.ctl.mu.Unlock()

	f := func(method, path, tok string, want int) resp {
		t.Helper()
		r := e.req(method, path, tok, nil)
		if r.status != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, r.status, r.body, want)
		}
		return r
	}
	f("POST", "/api/workers/w1/drain", alice, 403)
	f("DELETE", "/api/workers/w2", alice, 403)
	f("POST", "/api/workers/w1/drain", "", 401)
	if r := f("POST", "/api/workers/w1/drain", root, 200); r.json(t)["state"] != "DRAINING" {
		t.Fatalf("drained: %s", r.body)
	}
	if r := f("GET", "/api/workers", alice, 200); !strings.Contains(string(r.body), `"state":"DRAINING"`) {
		t.Fatalf("the list after a drain: %s", r.body)
	}
	if r := f("DELETE", "/api/workers/w1/drain", root, 200); r.json(t)["state"] != "IDLE" {
		t.Fatalf("resumed: %s", r.body)
	}
	if r := f("DELETE", "/api/workers/w1", root, 409); r.errCode(t) != "conflict" {
		t.Fatalf("forgetting a worker that is up: %s", r.body)
	}
	f("DELETE", "/api/workers/w2", root, 204)
	f("DELETE", "/api/workers/w2", root, 404)
	f("POST", "/api/workers/nobody/drain", root, 404)
	f("POST", "/api/workers/a%20b/drain", root, 400)
	f("GET", "/api/workers/w1/drain", root, 405)
}
