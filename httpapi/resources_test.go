package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

// A run's cores and memory (API.md "Resources"): what it asks for, or the
// master's defaults scaled by its GPUs, on the Task; through every create
// path (submit, rerun, a sweep's members).
func TestResources_Success(t *testing.T) {
	e := newEnvWith(t, func(c *Config) {
		c.Resources = &core.ResourceDefaults{CPUsPerGPU: 4, MemoryMBPerGPU: 8192, CPUs: 0.5, MemoryMB: 1024}
	})
	tok, _ := e.user("alice")
	f := func(body string, cpus float64, mem int64) string {
		t.Helper()
		id := e.submit(tok, body)
		got := e.task(id)
		if got.CPUs != cpus || got.MemoryMB != mem {
			t.Fatalf("%s: cpus %v memoryMb %d, want %v %d", body, got.CPUs, got.MemoryMB, cpus, mem)
		}
		return id
	}
	f(`{"command":["x"]}`, 0.5, 1024)
	f(`{"command":["x"],"gpus":2}`, 8, 16384)
	f(`{"command":["x"],"gpus":2,"cpus":1.5}`, 1.5, 16384)
	f(`{"command":["x"],"cpus":0.25,"memoryMb":64}`, 0.25, 64)
	defaulted := f(`{"command":["x"],"gpus":1}`, 4, 8192)
	asked := f(`{"command":["x"],"gpus":1,"cpus":3,"memoryMb":3000}`, 3, 3000)
	f(`{"command":["x"],"cpus":4096,"memoryMb":67108864}`, 4096, 64<<20)
	f(`{"command":["x"],"cpus":1.23456}`, 1.235, 1024)

	rerun := func(id, body string) core.Task {
		t.Helper()
		r := e.req("POST", "/api/tasks/"+id+"/rerun", tok, body)
		if r.status != http.StatusAccepted {
			t.Fatalf("rerun %s: %d %s", body, r.status, r.body)
		}
		return e.task(r.json(t)["id"].(string))
	}
	// A rerun inherits what its original got; one with other GPUs gets the
	// defaults for them unless the original asked for its own.
	if n := rerun(asked, `{}`); n.CPUs != 3 || n.MemoryMB != 3000 {
		t.Fatalf("rerun: %v %d", n.CPUs, n.MemoryMB)
	}
	if n := rerun(defaulted, `{"gpus":2}`); n.CPUs != 8 || n.MemoryMB != 16384 {
		t.Fatalf("rerun of a defaulted run on 2 GPUs: %v %d", n.CPUs, n.MemoryMB)
	}
	if n := rerun(asked, `{"gpus":2}`); n.CPUs != 3 || n.MemoryMB != 3000 {
		t.Fatalf("rerun of a run that asked, on 2 GPUs: %v %d", n.CPUs, n.MemoryMB)
	}
	if n := rerun(asked, `{"cpus":0.5,"memoryMb":512}`); n.CPUs != 0.5 || n.MemoryMB != 512 {
		t.Fatalf("rerun overriding: %v %d", n.CPUs, n.MemoryMB)
	}

	_, runs := e.sweep(tok, `{"name":"s","base":{"command":["x"],"cpus":2,"memoryMb":4096},"grid":{"lr":[1,2]}}`)
	for _, id := range runs {
		if m := e.task(id); m.CPUs != 2 || m.MemoryMB != 4096 {
			t.Fatalf("sweep member: %v %d", m.CPUs, m.MemoryMB)
		}
	}
}

func TestResources_Failure(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	f := func(path, body, field string) {
		t.Helper()
		r := e.req("POST", path, tok, body)
		if r.status != http.StatusBadRequest || r.errCode(t) != "bad_request" {
			t.Fatalf("%s: want 400, got %d %s", body, r.status, r.body)
		}
		if !strings.Contains(string(r.body), field) {
			t.Fatalf("%s: the message does not name %s: %s", body, field, r.body)
		}
	}
	for _, v := range []string{`0`, `-1`, `0.001`, `4097`, `1e308`, `"2"`, `true`} {
		f("/api/train", `{"command":["x"],"cpus":`+v+`}`, "cpus")
	}
	for _, v := range []string{`0`, `1`, `-5`, `10737418240`, `1.5`, `"16GiB"`} {
		f("/api/train", `{"command":["x"],"memoryMb":`+v+`}`, "memoryMb")
	}
	f("/api/sweeps", `{"name":"s","base":{"command":["x"],"cpus":-2},"grid":{"lr":[1]}}`, "base: cpus")
	id := e.submit(tok, `{"command":["x"]}`)
	f("/api/tasks/"+id+"/rerun", `{"memoryMb":0}`, "memoryMb")
}
