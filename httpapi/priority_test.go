package httpapi

import (
	"net/http"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/sweep"
)

// TestPriorityNeverRaisedByAUser (issue 25): no path that makes a run lets
// a user's new run above priority 0. A positive priority a user names is
// refused; one the spec inherits (a run or member or step an admin
// raised) is clamped: submit, rerun, sweep, sweep retry, a sweep's
// proposals, pipeline, pipeline retry, and a run released by its
// dependency. An admin's own rerun keeps the raised priority (the clamp is
// for users).
func TestPriorityNeverRaisedByAUser(t *testing.T) {
	e, dc := newDepsEnv(t)
	root, _ := e.user("root")
	tok, _ := e.user("alice")
	raise := func(run string) {
		t.Helper()
		if r := e.req("POST", "/api/tasks/"+run+"/priority", root, `{"priority": 10}`); r.status != http.StatusOK {
			t.Fatalf("an admin raises %s: %d %s", run, r.status, r.body)
		}
	}
	accepted := func(r resp) map[string]any {
		t.Helper()
		if r.status != http.StatusAccepted {
			t.Fatalf("%d %s, want 202", r.status, r.body)
		}
		return r.json(t)
	}
	ids := func(v any) []string { // an answer's runs: an id, a list or a map of them
		var out []string
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []any:
			for _, x := range v {
				out = append(out, x.(string))
			}
		case map[string]any:
			for _, x := range v {
				out = append(out, x.(string))
			}
		}
		return out
	}

	for _, c := range []struct{ what, path, body string }{
		{"a submission", "/api/train", `{"command":["x"],"priority":5}`},
		{"a rerun", "/api/tasks/" + e.submit(tok, `{"command":["x"]}`) + "/rerun", `{"priority":5}`},
		{"a sweep", "/api/sweeps", `{"base":{"command":["x"],"priority":5},"grid":{"a":[1,2]}}`},
		{"a pipeline", "/api/pipelines", `{"name":"p","steps":[{"name":"a","command":["x"],"priority":5}]}`},
	} {
		if r := e.req("POST", c.path, tok, c.body); r.status != http.StatusForbidden || r.errCode(t) != codeForbidden {
			t.Errorf("%s with priority 5 by a user: %d %s, want 403", c.what, r.status, r.body)
		}
	}

	type made struct {
		what string
		runs func() []string // what alice's act made of what an admin raised
		want int
	}
	cases := []made{
		{"a rerun of a raised run", func() []string {
			id := e.submit(tok, `{"command":["x"]}`)
			raise(id)
			return ids(accepted(e.req("POST", "/api/tasks/"+id+"/rerun", tok, nil))["id"])
		}, 0},
		{"an admin's rerun of a raised run", func() []string {
			id := e.submit(tok, `{"command":["x"]}`)
			raise(id)
			return ids(accepted(e.req("POST", "/api/tasks/"+id+"/rerun", root, nil))["id"])
		}, 10},
		{"a sweep retry of a raised member", func() []string {
			id, runs := e.sweep(tok, `{"base":{"command":["x"]},"grid":{"a":[1,2]}}`)
			raise(runs[0])
			e.finish(runs[0], core.StatusFailed)
			return ids(accepted(e.req("POST", "/api/sweeps/"+id+"/retry", tok, nil))["runs"])
		}, 0},
		{"a sweep's proposals after a raised member", func() []string {
			id, runs := e.sweep(tok, `{"base":{"command":["x"]},"grid":{"a":[1]}}`)
			raise(runs[0])
			sw, err := e.st.Sweep(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.srv.AddMembers(t.Context(), sw, e.task(runs[0]), sw.Members,
				[]sweep.Member{{Params: []byte(`{"a":2}`), Label: "a=2"}}); err != nil {
				t.Fatal(err)
			}
			members, err := e.st.SweepRuns(t.Context(), id)
			if err != nil || len(members) != 2 {
				t.Fatalf("sweep runs: %v %v", members, err)
			}
			return []string{members[1].ID}
		}, 0},
		{"a pipeline retry of a raised step", func() []string {
			id, runs := e.pipeline(tok, `{"name":"p","steps":[{"name":"a","command":["x"]}]}`)
			raise(runs["a"])
			e.finish(runs["a"], core.StatusFailed)
			return ids(accepted(e.req("POST", "/api/pipelines/"+id+"/retry", tok, nil))["runs"])
		}, 0},
		{"a run released after a raised parent", func() []string {
			parent := e.submit(tok, `{"command":["x"]}`)
			raise(parent)
			child := e.submit(tok, `{"command":["x"],"after":[{"run":"`+parent+`"}]}`)
			e.finish(parent, core.StatusSucceeded)
			if _, err := dc.Decide(t.Context(), []string{child}); err != nil {
				t.Fatal(err)
			}
			if tk := e.task(child); tk.Waiting {
				t.Fatalf("the child still waits: %+v", tk)
			}
			return []string{child}
		}, 0},
		{"a submission", func() []string { return []string{e.submit(tok, `{"command":["x"]}`)} }, 0},
	}
	for _, c := range cases {
		runs := c.runs()
		if len(runs) == 0 {
			t.Errorf("%s made no run", c.what)
		}
		for _, id := range runs {
			if p := e.task(id).Priority; p != c.want {
				t.Errorf("%s: run %s has priority %d, want %d", c.what, id, p, c.want)
			}
		}
	}
}
