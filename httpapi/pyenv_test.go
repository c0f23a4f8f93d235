package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

// A run's Python environment (issue 27; API.md "Python environments") is
// on its Task through every create path: submit, rerun (kept, or
// replaced), a sweep's members.
func TestPythonEnv_Success(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	req := e.task(e.submit(tok, `{"command":["python3","train.py"],"python":{"requirements":"exp/requirements.txt"}}`))
	if req.Python == nil || *req.Python != (core.PythonEnv{Requirements: "exp/requirements.txt"}) {
		t.Fatalf("python: %+v", req.Python)
	}
	venv := e.task(e.submit(tok, `{"command":["python3","train.py"],"python":{"venv":"/shared/envs/x"}}`))
	if venv.Python == nil || venv.Python.Venv != "/shared/envs/x" || venv.Python.Requirements != "" {
		t.Fatalf("python: %+v", venv.Python)
	}
	if none := e.task(e.submit(tok, `{"command":["x"],"python":null}`)); none.Python != nil {
		t.Fatalf("no python env: %+v", none.Python)
	}
	r := e.req("GET", "/api/tasks/"+req.ID, tok, "")
	if !strings.Contains(string(r.body), `"python":{"requirements":"exp/requirements.txt"}`) {
		t.Fatalf("the Task's JSON: %s", r.body)
	}
	rerun := func(id, body string) core.Task {
		t.Helper()
		r := e.req("POST", "/api/tasks/"+id+"/rerun", tok, body)
		if r.status != http.StatusAccepted {
			t.Fatalf("rerun %s: %d %s", body, r.status, r.body)
		}
		return e.task(r.json(t)["id"].(string))
	}
	if n := rerun(req.ID, `{}`); n.Python == nil || n.Python.Requirements != "exp/requirements.txt" {
		t.Fatalf("rerun: %+v", n.Python)
	}
	if n := rerun(req.ID, `{"python":{"venv":"/opt/v"}}`); n.Python == nil || *n.Python != (core.PythonEnv{Venv: "/opt/v"}) {
		t.Fatalf("rerun with another env: %+v", n.Python)
	}
	_, runs := e.sweep(tok, `{"name":"s","base":{"command":["x"],"python":{"venv":"/shared/envs/y"}},"grid":{"lr":[1,2]}}`)
	for _, id := range runs {
		if m := e.task(id); m.Python == nil || m.Python.Venv != "/shared/envs/y" {
			t.Fatalf("sweep member: %+v", m.Python)
		}
	}
}

func TestPythonEnv_Failure(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	for _, c := range []struct{ body, field string }{
		{`{"python":{}}`, `python must name one of`},
		{`{"python":{"requirements":"r.txt","venv":"/v"}}`, `python names both`},
		{`{"python":{"venv":"envs/x"}}`, `python.venv \"envs/x\" must be an absolute path`},
		{`{"python":{"requirements":"/etc/r.txt"}}`, `python.requirements \"/etc/r.txt\" must be a path relative`},
		{`{"python":{"requirements":"a/../../r.txt"}}`, `python.requirements \"a/../../r.txt\" must not contain`},
		{`{"python":{"requirements":"` + strings.Repeat("a", 2000) + `"}}`, `python.requirements must be at most 1024 bytes`},
		{`{"python":{"venv":"/v\n"}}`, `python.venv must be at most`},
		{`{"python":"venv"}`, `python`},
		{`{"python":{"venv":3}}`, `python.venv`},
	} {
		body := `{"command":["x"],` + c.body[1:]
		r := e.req("POST", "/api/train", tok, body)
		if r.status != http.StatusBadRequest || r.errCode(t) != "bad_request" || !strings.Contains(string(r.body), c.field) {
			t.Errorf("%s: want 400 naming %s, got %d %s", c.body, c.field, r.status, r.body)
		}
	}
}
