package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

// Submissions of interactive runs (issue 34): kind and record on the Task,
// a command optional, the record flag through the env only the master sets.
func TestInteractiveSubmit_Success(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	sh := e.task(e.submit(tok, `{"kind":"interactive"}`))
	if sh.Kind != core.KindInteractive || len(sh.Command) != 0 || sh.Name != "shell" || sh.Env[core.RecordEnv] != "" {
		t.Fatalf("a session without a command: kind %q, command %v, name %q, env %v", sh.Kind, sh.Command, sh.Name, sh.Env)
	}
	nr := e.task(e.submit(tok, `{"kind":"interactive","record":false,"command":["htop"],"env":{"A":"1"}}`))
	if nr.Env[core.RecordEnv] != "0" || nr.Env["A"] != "1" {
		t.Fatalf("record false: env %v", nr.Env)
	}
	if b := e.task(e.submit(tok, `{"command":["x"]}`)); b.Kind != core.KindBatch {
		t.Fatalf("a plain submission has kind %q", b.Kind)
	}
	// A rerun is a session again, unrecorded again.
	r := e.req("POST", "/api/tasks/"+nr.ID+"/rerun", tok, `{}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("rerun: %d %s", r.status, r.body)
	}
	if rr := e.task(r.json(t)["id"].(string)); rr.Kind != core.KindInteractive || rr.Env[core.RecordEnv] != "0" {
		t.Fatalf("rerun of a session: kind %q env %v", rr.Kind, rr.Env)
	}
}

func TestInteractiveSubmit_Failure(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	f := func(body, field string) {
		t.Helper()
		r := e.req("POST", "/api/train", tok, body)
		if r.status != http.StatusBadRequest || r.errCode(t) != "bad_request" || !strings.Contains(string(r.body), field) {
			t.Fatalf("%s: want 400 naming %s, got %d %s", body, field, r.status, r.body)
		}
	}
	f(`{"kind":"notebook"}`, "kind")
	f(`{"kind":"batch"}`, "command")
	f(`{"command":["x"],"record":false}`, "record")
	f(`{"kind":"interactive","env":{"RLSCHED_RECORD":"0"}}`, "RLSCHED_RECORD")
}

// The terminal's refusals before any upgrade: another user (an admin too)
// 403, a batch run or one that has not started or has ended 409, an
// unknown one 404, no token 401.
func TestTerminal_Refusals(t *testing.T) {
	e := newEnv(t)
	alice, _ := e.user("alice")
	bob, _ := e.user("bob")
	sess := e.submit(bob, `{"kind":"interactive"}`)
	batch := e.submit(bob, `{"command":["x"]}`)
	ended := e.submit(bob, `{"kind":"interactive"}`)
	e.finish(ended, core.StatusSucceeded)
	ws := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	f := func(path, tok string, status int, words ...string) {
		t.Helper()
		r := e.req("GET", path, tok, nil, ws...)
		if r.status != status {
			t.Fatalf("GET %s: %d %s, want %d", path, r.status, r.body, status)
		}
		for _, w := range words {
			if !strings.Contains(string(r.body), w) {
				t.Fatalf("GET %s: %s lacks %q", path, r.body, w)
			}
		}
	}
	for _, p := range []string{"/ws/sessions/", "/api/tasks/"} {
		suffix := ""
		if p == "/api/tasks/" {
			suffix = "/terminal"
		}
		f(p+sess+suffix, alice, http.StatusForbidden, "owner")
		f(p+sess+suffix, bob, http.StatusConflict, "QUEUED")
		f(p+batch+suffix, bob, http.StatusConflict, "batch")
		f(p+ended+suffix, bob, http.StatusConflict, "SUCCEEDED")
		f(p+"r-unknown"+suffix, bob, http.StatusNotFound)
		f(p+sess+suffix, "", http.StatusUnauthorized)
		f(p+"..%2Fx"+suffix, bob, http.StatusBadRequest)
	}
}

// MAX_INTERACTIVE_GPUS: a user's sessions not yet ended hold at most that
// many GPUs together; batch runs and other users' sessions do not count.
func TestInteractiveGPUCap(t *testing.T) {
	e := newEnvWith(t, func(c *Config) { c.MaxInteractiveGPUs = 2 })
	alice, _ := e.user("alice")
	bob, _ := e.user("bob")
	f := func(tok, body string, status int, words ...string) {
		t.Helper()
		r := e.req("POST", "/api/train", tok, body)
		if r.status != status {
			t.Fatalf("%s: %d %s, want %d", body, r.status, r.body, status)
		}
		for _, w := range words {
			if !strings.Contains(string(r.body), w) {
				t.Fatalf("%s: %s lacks %q", body, r.body, w)
			}
		}
	}
	f(alice, `{"kind":"interactive","gpus":3}`, http.StatusBadRequest, "gpus", "MAX_INTERACTIVE_GPUS")
	first := e.submit(alice, `{"kind":"interactive","gpus":1}`)
	e.submit(alice, `{"command":["x"],"gpus":4}`)
	e.submit(bob, `{"kind":"interactive","gpus":2}`)
	e.submit(alice, `{"kind":"interactive"}`) // no GPUs: not counted
	e.submit(alice, `{"kind":"interactive","gpus":1}`)
	f(alice, `{"kind":"interactive","gpus":1}`, http.StatusConflict, "2 GPUs", "MAX_INTERACTIVE_GPUS")
	e.finish(first, core.StatusSucceeded)
	f(alice, `{"kind":"interactive","gpus":1}`, http.StatusAccepted)
}
