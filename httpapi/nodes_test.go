package httpapi

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A multi-node group's size (issue 29): nodes on the Task through submit,
// rerun (kept unless changed) and a sweep's members; 1 when not given.
func TestNodes_Success(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	if got := e.req("GET", "/api/tasks/"+e.submit(tok, `{"command":["x"]}`), tok, "").json(t); got["nodes"] != 1.0 {
		t.Fatalf("default nodes: %v", got["nodes"])
	}
	id := e.submit(tok, `{"command":["x"],"gpus":2,"nodes":3}`)
	if got := e.task(id); got.Nodes != 3 || got.GPUs != 2 {
		t.Fatalf("task: nodes %d gpus %d", got.Nodes, got.GPUs)
	}
	rerun := func(body string) map[string]any {
		t.Helper()
		r := e.req("POST", "/api/tasks/"+id+"/rerun", tok, body)
		if r.status != http.StatusAccepted {
			t.Fatalf("rerun %s: %d %s", body, r.status, r.body)
		}
		return e.req("GET", "/api/tasks/"+r.json(t)["id"].(string), tok, "").json(t)
	}
	if n := rerun(`{}`); n["nodes"] != 3.0 {
		t.Fatalf("rerun keeps nodes: %v", n["nodes"])
	}
	if n := rerun(`{"nodes":1}`); n["nodes"] != 1.0 {
		t.Fatalf("rerun on one worker: %v", n["nodes"])
	}
	_, runs := e.sweep(tok, `{"name":"s","base":{"command":["x"],"gpus":1,"nodes":2},"grid":{"lr":[1,2]}}`)
	for _, id := range runs {
		if m := e.task(id); m.Nodes != 2 {
			t.Fatalf("sweep member: nodes %d", m.Nodes)
		}
	}
}

func TestNodes_Failure(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	f := func(path, body, want string) {
		t.Helper()
		r := e.req("POST", path, tok, body)
		if r.status != http.StatusBadRequest || r.errCode(t) != "bad_request" {
			t.Fatalf("%s: want 400, got %d %s", body, r.status, r.body)
		}
		if !strings.Contains(string(r.body), want) {
			t.Fatalf("%s: the message does not say %q: %s", body, want, r.body)
		}
	}
	f("/api/train", `{"command":["x"],"nodes":0}`, "nodes must be an integer from 1 to 64")
	f("/api/train", `{"command":["x"],"nodes":1000}`, "nodes must be an integer from 1 to 64")
	f("/api/train", `{"command":["x"],"nodes":-1}`, "nodes must be")
	f("/api/train", `{"command":["x"],"nodes":1.5}`, `\"nodes\"`)
	f("/api/train", `{"command":["x"],"nodes":"2"}`, `\"nodes\"`)
	f("/api/train", `{"command":["x"],"gpus":0.5,"nodes":2}`, "nodes: a group's members take whole GPUs")
	f("/api/sweeps", `{"name":"s","base":{"command":["x"],"nodes":0},"grid":{"lr":[1]}}`, "base: nodes")
	id := e.submit(tok, `{"command":["x"]}`)
	f("/api/tasks/"+id+"/rerun", `{"nodes":65}`, "nodes must be")
}

// A group's logs: rank 0's is the run's log (the default), rank N's its
// own file; a rank the run does not have is 400 naming rank.
func TestNodes_LogsByRank(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	g := e.submit(tok, `{"command":["x"],"nodes":2}`)
	one := e.submit(tok, `{"command":["x"]}`)
	if err := os.MkdirAll(e.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{g + ".log": "rank zero\n", g + ".rank1.log": "rank one\n"} {
		if err := os.WriteFile(filepath.Join(e.logDir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for q, want := range map[string]string{"": "rank zero", "?rank=0": "rank zero", "?rank=1": "rank one"} {
		r := e.req("GET", "/api/monitor/logs/"+g+q, tok, nil)
		var a logAnswer
		mustJSON(t, r.body, &a)
		if r.status != http.StatusOK || len(a.Content) != 1 || a.Content[0] != want {
			t.Fatalf("logs%s: %d %s, want %q", q, r.status, r.body, want)
		}
	}
	for _, p := range []string{g + "?rank=2", g + "?rank=-1", g + "?rank=x", g + "?rank=1000", one + "?rank=1"} {
		r := e.req("GET", "/api/monitor/logs/"+p, tok, nil)
		if r.status != http.StatusBadRequest || r.errCode(t) != "bad_request" || !strings.Contains(string(r.body), "rank") {
			t.Fatalf("logs/%s: want 400 naming rank, got %d %s", p, r.status, r.body)
		}
	}
}
