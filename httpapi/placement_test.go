package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// Where a run may go (API.md "Placement", issue 28): a fraction of a GPU,
// GPU memory, types and label constraints, on the Task through submit,
// rerun and a sweep's members.
func TestPlacement_Success(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	id := e.submit(tok, `{"command":["x"],"gpus":0.25,"gpuMemoryMb":8000,"gpuType":"A100",
		"constraints":{"pool":"a100","!pool":"interactive"}}`)
	got := e.task(id)
	if got.GPUs != 0 || got.GPUFraction != 0.25 || got.GPUMemoryMB != 8000 || !slices.Equal(got.GPUType, []string{"A100"}) ||
		got.Constraints["pool"] != "a100" || got.Constraints["!pool"] != "interactive" {
		t.Fatalf("task: %+v", got)
	}
	r := e.req("GET", "/api/tasks/"+id, tok, "")
	var raw map[string]any
	if err := json.Unmarshal(r.body, &raw); err != nil || raw["gpus"] != 0.25 {
		t.Fatalf("GET: gpus %v (%v) in %s", raw["gpus"], err, r.body)
	}
	if got := e.task(e.submit(tok, `{"command":["x"],"gpus":1,"gpuType":["a100","H100"]}`)); got.GPUs != 1 || len(got.GPUType) != 2 {
		t.Fatalf("list of types: %+v", got)
	}

	rerun := func(id, body string) map[string]any {
		t.Helper()
		r := e.req("POST", "/api/tasks/"+id+"/rerun", tok, body)
		if r.status != http.StatusAccepted {
			t.Fatalf("rerun %s: %d %s", body, r.status, r.body)
		}
		return e.req("GET", "/api/tasks/"+r.json(t)["id"].(string), tok, "").json(t)
	}
	if n := rerun(id, `{}`); n["gpus"] != 0.25 || n["gpuMemoryMb"] != 8000.0 {
		t.Fatalf("rerun keeps the placement: %v", n)
	}
	if n := rerun(id, `{"gpus":2,"gpuType":[],"constraints":{}}`); n["gpus"] != 2.0 || n["gpuType"] != nil || n["constraints"] != nil {
		t.Fatalf("rerun on whole GPUs, any type: %v", n)
	}
	_, runs := e.sweep(tok, `{"name":"s","base":{"command":["x"],"gpus":0.5,"gpuType":"RTX"},"grid":{"lr":[1,2]}}`)
	for _, id := range runs {
		if m := e.task(id); m.GPUFraction != 0.5 || m.GPUType[0] != "RTX" {
			t.Fatalf("sweep member: %+v", m)
		}
	}
}

func TestPlacement_Failure(t *testing.T) {
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
	f("/api/train", `{"command":["x"],"gpus":0.333}`, "gpus 0.333 has more than two decimals")
	f("/api/train", `{"command":["x"],"gpus":-0.5}`, "gpus must be 0 or more")
	f("/api/train", `{"command":["x"],"gpus":1.5}`, "gpus 1.5 is not supported")
	f("/api/train", `{"command":["x"],"gpus":65}`, "gpus must be 0..64")
	f("/api/train", `{"command":["x"],"gpus":"0.5"}`, "gpus")
	f("/api/train", `{"command":["x"],"gpus":1,"gpuMemoryMb":-1}`, "gpuMemoryMb")
	f("/api/train", `{"command":["x"],"gpus":1,"gpuMemoryMb":1e12}`, "gpuMemoryMb")
	f("/api/train", `{"command":["x"],"gpus":1,"gpuType":7}`, "gpuType must be")
	f("/api/train", `{"command":["x"],"gpus":1,"gpuType":[""]}`, "gpuType")
	f("/api/train", `{"command":["x"],"gpuType":"A100"}`, "give gpus too")
	f("/api/train", `{"command":["x"],"gpus":1,"constraints":{"po ol":"x"}}`, "constraints: key")
	f("/api/train", `{"command":["x"],"gpus":1,"constraints":["pool=x"]}`, "constraints")
	f("/api/sweeps", `{"name":"s","base":{"command":["x"],"gpus":0.333},"grid":{"lr":[1]}}`, "base: gpus")
	id := e.submit(tok, `{"command":["x"]}`)
	f("/api/tasks/"+id+"/rerun", `{"gpus":2.5}`, "gpus 2.5")
}
