package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

func (e *testEnv) pipeline(tok, body string) (string, map[string]string) {
	e.t.Helper()
	r := e.req("POST", "/api/pipelines", tok, body)
	if r.status != http.StatusAccepted {
		e.t.Fatalf("pipeline: %d %s", r.status, r.body)
	}
	var a struct {
		ID   string            `json:"id"`
		Runs map[string]string `json:"runs"`
	}
	mustJSON(e.t, r.body, &a)
	return a.ID, a.Runs
}

func (e *testEnv) getPipeline(tok, id string) pipelineAnswer {
	e.t.Helper()
	r := e.req("GET", "/api/pipelines/"+id, tok, nil)
	if r.status != http.StatusOK {
		e.t.Fatalf("get pipeline: %d %s", r.status, r.body)
	}
	var a pipelineAnswer
	mustJSON(e.t, r.body, &a)
	return a
}

func steps(n int, after func(i int) string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"name":"s%d","command":["x"]%s}`, i, after(i))
	}
	return `{"name":"p","steps":[` + strings.Join(parts, ",") + `]}`
}

func TestPipelines_BadInput(t *testing.T) {
	e, _ := newDepsEnv(t)
	e.user("root")
	tok, _ := e.user("alice")
	bobTok, _ := e.user("bob")
	bobs := e.submit(bobTok, `{"command":["x"]}`)
	before := countRuns(t, e)
	none := func(int) string { return "" }
	f := func(body string, status int, field string) {
		t.Helper()
		r := e.req("POST", "/api/pipelines", tok, body)
		if r.status != status || !strings.Contains(string(r.body), field) {
			t.Errorf("%.200s: %d %s, want %d naming %q", body, r.status, r.body, status, field)
		}
	}
	f(`{"name":"p","steps":[]}`, 400, "steps")
	f(`{"name":"p"}`, 400, "steps")
	f(steps(maxPipelineSteps+1, none), 400, "steps")
	f(steps(10000, none), 400, "steps")
	f(`{"steps":[{"name":"a","command":["x"]},{"name":"a","command":["y"]}]}`, 400, "steps[1].name")
	f(`{"steps":[{"command":["x"]}]}`, 400, "steps[0].name")
	f(`{"steps":[{"name":"a b","command":["x"]}]}`, 400, "steps[0].name")
	f(`{"steps":[{"name":"a","command":["x"],"after":[{"step":"nope"}]}]}`, 400, "steps[0].after[0].step")
	f(`{"steps":[{"name":"a","command":["x"],"after":[{"step":"a"}]}]}`, 400, "steps[0].after[0].step")
	f(`{"steps":[{"name":"a","command":["x"],"after":[{"step":"c"}]},{"name":"b","command":["x"],"after":[{"step":"a"}]},{"name":"c","command":["x"],"after":[{"step":"b"}]}]}`,
		400, "cycle")
	f(`{"steps":[{"name":"a","command":["x"]},{"name":"b","command":["x"],"after":[{"run":"`+bobs+`"}]}]}`, 403, "steps[1]: after[0].run")
	f(`{"steps":[{"name":"a","command":["x"]},{"name":"b","command":["x"],"after":[{"run":"nosuch"}]}]}`, 400, "steps[1]: after[0].run")
	f(`{"steps":[{"name":"a","command":["x"]},{"name":"b","gpus":-1,"command":["x"]}]}`, 400, "steps[1]: gpus")
	f(`{"steps":[{"name":"a","command":["x"]},{"name":"b","command":["x"],"inputsFrom":["a"]}]}`, 400, "steps[1]: inputsFrom[0]")
	f(`{"steps":[{"name":"a","command":["x"]}],"name":`+string(mustMarshal(strings.Repeat("n", 300)))+`}`, 400, "name")
	if n := countRuns(t, e); n != before {
		t.Errorf("%d runs after refused pipelines, want %d: nothing half-submitted", n, before)
	}
	if r := e.req("GET", "/api/pipelines/nosuch", tok, nil); r.status != 404 {
		t.Errorf("unknown pipeline: %d", r.status)
	}
}

func mustMarshal(v any) []byte { b, _ := json.Marshal(v); return b }

// A train → 3 × eval → report pipeline: the graph, one eval failing
// cancels the report, and a retry reruns that eval and the report only,
// wired to the kept train.
func TestPipelines_RunAndRetry(t *testing.T) {
	e, c := newDepsEnv(t)
	e.user("root")
	tok, _ := e.user("alice")
	bobTok, _ := e.user("bob")
	id, runs := e.pipeline(tok, `{"name":"exp","steps":[
		{"name":"train","command":["train"]},
		{"name":"eval1","command":["eval"],"after":[{"step":"train"}],"inputsFrom":["train"]},
		{"name":"eval2","command":["eval"],"after":[{"step":"train"}],"inputsFrom":["train"]},
		{"name":"eval3","command":["eval"],"after":[{"step":"train"}],"inputsFrom":["train"]},
		{"name":"report","command":["report"],"after":[{"step":"eval1"},{"step":"eval2"},{"step":"eval3","when":"ended"}]}]}`)
	if len(runs) != 5 {
		t.Fatalf("runs %v", runs)
	}
	ev := e.task(runs["eval2"])
	if !ev.Waiting || ev.After[0].Run != runs["train"] || ev.InputsFrom[0] != runs["train"] || ev.Name != "eval2" {
		t.Fatalf("eval2: waiting %v after %+v inputsFrom %v name %q", ev.Waiting, ev.After, ev.InputsFrom, ev.Name)
	}
	p := e.getPipeline(tok, id)
	depth := map[string]int{}
	for _, st := range p.Steps {
		depth[st.Name] = st.Depth
	}
	if depth["train"] != 0 || depth["eval1"] != 1 || depth["report"] != 2 || p.Steps[4].After[2] != "eval3" || p.Counts[core.StatusQueued] != 5 {
		t.Fatalf("pipeline: %+v", p)
	}
	if !strings.Contains(p.Steps[4].PendingReason, runs["eval1"]) {
		t.Errorf("report's pending sentence %q", p.Steps[4].PendingReason)
	}
	decide := func() {
		t.Helper()
		var ids []string
		for _, id := range runs {
			ids = append(ids, id)
		}
		if _, err := c.Decide(t.Context(), ids); err != nil {
			t.Fatal(err)
		}
	}
	e.finish(runs["train"], core.StatusSucceeded)
	decide()
	e.finish(runs["eval1"], core.StatusSucceeded)
	e.finish(runs["eval2"], core.StatusFailed)
	e.finish(runs["eval3"], core.StatusSucceeded)
	decide()
	if r := e.task(runs["report"]); r.Status != core.StatusCancelled || r.Reason != core.ReasonDependency {
		t.Fatalf("report: %s %q", r.Status, r.Reason)
	}
	if r := e.req("POST", "/api/pipelines/"+id+"/retry", bobTok, nil); r.status != 403 {
		t.Errorf("another user's retry: %d", r.status)
	}
	r := e.req("POST", "/api/pipelines/"+id+"/retry", tok, nil)
	var a struct {
		Runs map[string]string `json:"runs"`
	}
	mustJSON(t, r.body, &a)
	if r.status != 202 || len(a.Runs) != 2 || a.Runs["eval2"] == "" || a.Runs["report"] == "" {
		t.Fatalf("retry: %d %s, want eval2 and report", r.status, r.body)
	}
	ev2, rep := e.task(a.Runs["eval2"]), e.task(a.Runs["report"])
	if ev2.RerunOf != runs["eval2"] || ev2.After[0].Run != runs["train"] || ev2.Waiting {
		t.Errorf("new eval2: rerunOf %s after %+v waiting %v (train succeeded: released at once)", ev2.RerunOf, ev2.After, ev2.Waiting)
	}
	if rep.After[0].Run != runs["eval1"] || rep.After[1].Run != ev2.ID || rep.After[2].Run != runs["eval3"] || !rep.Waiting {
		t.Errorf("new report: after %+v waiting %v", rep.After, rep.Waiting)
	}
	p = e.getPipeline(tok, id)
	if p.Steps[2].Run != ev2.ID || p.Steps[4].Run != rep.ID || p.Steps[0].Run != runs["train"] || p.Steps[4].Depth != 2 {
		t.Fatalf("pipeline after retry: %+v", p.Steps)
	}
	if r := e.req("POST", "/api/pipelines/"+id+"/retry", tok, nil); r.status != 409 {
		t.Errorf("retry with nothing ended unsucceeded: %d %s", r.status, r.body)
	}
}
