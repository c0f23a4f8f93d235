package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/depctl"
)

// newDepsEnv is a test server with a dependency controller deciding the
// runs it creates waiting (no running loop: each test ends its parents in
// the store and asks Decide, or relies on the decision at creation).
func newDepsEnv(t *testing.T) (*testEnv, *depctl.Controller) {
	var c *depctl.Controller
	e := newEnvWith(t, func(cfg *Config) { cfg.Deps = lateDecider{&c} })
	c = depctl.New(depctl.Config{Store: e.st, Log: zerolog.Nop()})
	return e, c
}

// lateDecider decides with the controller made once the store is known.
type lateDecider struct{ c **depctl.Controller }

func (d lateDecider) Decide(ctx context.Context, ids []string) (int, error) {
	return (*d.c).Decide(ctx, ids)
}

func TestDependencies_BadInput(t *testing.T) {
	e, _ := newDepsEnv(t)
	adminTok, _ := e.user("root") // the first user is an admin
	tok, _ := e.user("alice")
	bobTok, _ := e.user("bob")
	own := e.submit(tok, `{"command":["x"]}`)
	bobs := e.submit(bobTok, `{"command":["x"]}`)
	bobSweep, _ := e.sweep(bobTok, `{"base":{"command":["y"]},"grid":{"a":[1,2]}}`)
	many := make([]string, core.MaxParents+1)
	for i := range many {
		many[i] = fmt.Sprintf(`{"run":"r%d"}`, i)
	}
	f := func(body string, status int, field string) {
		t.Helper()
		r := e.req("POST", "/api/train", tok, body)
		if r.status != status || !strings.Contains(string(r.body), field) {
			t.Errorf("%s: %d %s, want %d naming %q", body, r.status, r.body, status, field)
		}
		if r.status == http.StatusBadRequest && r.errCode(t) != codeBadRequest {
			t.Errorf("%s: code %s", body, r.errCode(t))
		}
	}
	f(`{"command":["x"],"after":[{"run":"nosuchrun"}]}`, 400, "after[0].run")
	f(`{"command":["x"],"after":[{"run":"`+own+`"},{"sweep":"nosuchsweep"}]}`, 400, "after[1].sweep")
	f(`{"command":["x"],"after":[{"run":"`+bobs+`"}]}`, 403, "after[0].run")
	f(`{"command":["x"],"after":[{"sweep":"`+bobSweep+`"}]}`, 403, "after[0].sweep")
	f(`{"command":["x"],"after":[{"run":"`+own+`","when":"sometimes"}]}`, 400, "after[0].when")
	f(`{"command":["x"],"after":[{"run":"`+own+`","sweep":"`+bobSweep+`"}]}`, 400, "after[0]")
	f(`{"command":["x"],"after":[{}]}`, 400, "after[0]")
	f(`{"command":["x"],"after":[{"run":"../etc"}]}`, 400, "after[0]")
	f(`{"command":["x"],"after":[{"step":"train"}]}`, 400, "after[0].step")
	f(`{"command":["x"],"after":[`+strings.Join(many, ",")+`]}`, 400, "after")
	f(`{"command":["x"],"after":[{"run":"`+own+`"},{"run":"`+own+`","when":"failed"}]}`, 400, "after")
	f(`{"command":["x"],"after":"`+own+`"}`, 400, "after")
	f(`{"command":["x"],"inputsFrom":["`+own+`"]}`, 400, "inputsFrom[0]")
	f(`{"command":["x"],"after":[{"run":"`+own+`"}],"inputsFrom":["../x"]}`, 400, "inputsFrom[0]")
	// A sweep's base is checked the same way, its errors under base.
	r := e.req("POST", "/api/sweeps", tok, `{"base":{"command":["y"],"after":[{"run":"`+bobs+`"}]},"grid":{"a":[1]}}`)
	if r.status != 403 || !strings.Contains(string(r.body), "base: after[0].run") {
		t.Errorf("sweep after another's run: %d %s", r.status, r.body)
	}
	// An admin may wait for anyone's run.
	e.submit(adminTok, `{"command":["x"],"after":[{"run":"`+bobs+`"}]}`)
	if n := countRuns(t, e); n != 4+1 { // own, bobs, 2 sweep members, the admin's child
		t.Errorf("%d runs stored, want 5: a refused submission stores nothing", n)
	}
}

func countRuns(t *testing.T, e *testEnv) int {
	t.Helper()
	c, err := e.st.CountByStatus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

func TestDependencies_WaitReleaseCancel(t *testing.T) {
	e, c := newDepsEnv(t)
	e.user("root")
	tok, _ := e.user("alice")
	p1 := e.submit(tok, `{"command":["x"]}`)
	p2 := e.submit(tok, `{"command":["x"]}`)
	child := e.submit(tok, `{"command":["x"],"after":[{"run":"`+p1+`"},{"run":"`+p2+`","when":"ended"}],"inputsFrom":["`+p1+`"]}`)
	var got core.Task
	r := e.req("GET", "/api/tasks/"+child, tok, nil)
	mustJSON(t, r.body, &got)
	if got.Status != core.StatusQueued || got.PendingCode != core.ReasonDependency ||
		!strings.Contains(got.PendingReason, p1) || !strings.Contains(got.PendingReason, p2) ||
		len(got.After) != 2 || got.After[0].When != core.WhenSucceeded || got.InputsFrom[0] != p1 {
		t.Fatalf("waiting child: %s", r.body)
	}
	e.finish(p1, core.StatusSucceeded)
	r = e.req("GET", "/api/tasks/"+child, tok, nil)
	mustJSON(t, r.body, &got)
	if strings.Contains(got.PendingReason, p1) || !strings.Contains(got.PendingReason, p2) {
		t.Errorf("pending sentence with %s ended: %q, want only %s named", p1, got.PendingReason, p2)
	}
	e.finish(p2, core.StatusFailed)
	if n, err := c.Decide(t.Context(), []string{child}); err != nil || n != 1 {
		t.Fatalf("Decide: %d %v", n, err)
	}
	if tk := e.task(child); tk.Waiting || tk.Status != core.StatusQueued {
		t.Fatalf("child after both ended: %s waiting %v", tk.Status, tk.Waiting)
	}

	// A child of a parent that already failed its condition is answered
	// CANCELLED, with the reason and the parent named.
	r = e.req("POST", "/api/train", tok, `{"command":["x"],"after":[{"run":"`+p2+`"}]}`)
	m := r.json(t)
	if r.status != http.StatusAccepted || m["status"] != "CANCELLED" {
		t.Fatalf("child of a failed parent: %d %s, want 202 CANCELLED", r.status, r.body)
	}
	late := e.task(m["id"].(string))
	if late.Reason != core.ReasonDependency || !strings.Contains(late.Error, p2) {
		t.Fatalf("late child: reason %q error %q", late.Reason, late.Error)
	}
	// One of parents that ended as it asks starts at once.
	r = e.req("POST", "/api/train", tok, `{"command":["x"],"after":[{"run":"`+p2+`","when":"failed"}]}`)
	if m := r.json(t); m["status"] != "QUEUED" || e.task(m["id"].(string)).Waiting {
		t.Fatalf("child of an ended parent: %s, want QUEUED, released", r.body)
	}

	// A rerun drops after (decisions.md): it runs now.
	r = e.req("POST", "/api/tasks/"+late.ID+"/rerun", tok, nil)
	if m := r.json(t); r.status != 202 || m["status"] != "QUEUED" || e.task(m["id"].(string)).After != nil {
		t.Fatalf("rerun of a waiting child: %d %s", r.status, r.body)
	}
}

func TestDependencies_SweepAfter(t *testing.T) {
	e, c := newDepsEnv(t)
	e.user("root")
	tok, _ := e.user("alice")
	sw, members := e.sweep(tok, `{"base":{"command":["y"]},"grid":{"a":[1,2,3]}}`)
	child := e.submit(tok, `{"command":["x"],"after":[{"sweep":"`+sw+`"}]}`)
	tk := e.task(child)
	if len(tk.After) != 3 || tk.After[0].Sweep != sw || !tk.Waiting {
		t.Fatalf("child of a sweep: after %+v waiting %v", tk.After, tk.Waiting)
	}
	// A sweep whose members wait for a run.
	_, waiting := e.sweep(tok, `{"base":{"command":["y"],"after":[{"run":"`+members[0]+`","when":"ended"}]},"grid":{"a":[1,2]}}`)
	for _, id := range waiting {
		if w := e.task(id); !w.Waiting || len(w.After) != 1 {
			t.Fatalf("member %s: waiting %v after %+v", id, w.Waiting, w.After)
		}
	}
	e.finish(members[0], core.StatusSucceeded)
	e.finish(members[1], core.StatusSucceeded)
	if _, err := c.Decide(t.Context(), append([]string{child}, waiting...)); err != nil {
		t.Fatal(err)
	}
	if w := e.task(waiting[0]); w.Waiting {
		t.Fatalf("member still waiting after its parent ended")
	}
	if w := e.task(child); !w.Waiting {
		t.Fatalf("child of the sweep released with a member still going")
	}
	e.finish(members[2], core.StatusCancelled)
	if _, err := c.Decide(t.Context(), []string{child}); err != nil {
		t.Fatal(err)
	}
	if w := e.task(child); w.Status != core.StatusCancelled || !strings.Contains(w.Error, members[2]) {
		t.Fatalf("child of a sweep with a cancelled member: %s %q", w.Status, w.Error)
	}
}
