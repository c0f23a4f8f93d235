package httpapi

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// A USER may submit priority ≤ 0 only; admins any in range. A user's
// rerun of an admin's urgent run does not inherit its priority.
func TestPolicy_PriorityRights(t *testing.T) {
	e := newEnv(t)
	root, _ := e.user("root")
	alice, _ := e.user("alice")

	for _, body := range []string{`{"command":["a"],"priority":1}`, `{"command":["a"],"priority":1000}`} {
		r := e.req("POST", "/api/train", alice, body)
		if r.status != http.StatusForbidden || r.errCode(t) != "forbidden" {
			t.Fatalf("user submits %s: %d %s, want 403 forbidden", body, r.status, r.body)
		}
	}
	if r := e.req("POST", "/api/train", alice, `{"command":["a"],"priority":1001}`); r.status != http.StatusBadRequest {
		t.Fatalf("out of range: %d %s, want 400", r.status, r.body)
	}
	if id := e.submit(alice, `{"command":["a"],"priority":-2}`); e.task(id).Priority != -2 {
		t.Fatalf("user's priority -2 not kept")
	}
	e.submit(alice, `{"command":["a"],"priority":0}`)
	urgent := e.submit(root, `{"command":["a"],"priority":50}`)
	if got := e.task(urgent).Priority; got != 50 {
		t.Fatalf("admin's priority: %d", got)
	}
	r := e.req("POST", "/api/tasks/"+urgent+"/rerun", alice, nil)
	if r.status != http.StatusAccepted {
		t.Fatalf("user reruns an admin's run: %d %s", r.status, r.body)
	}
	if got := e.task(r.json(t)["id"].(string)).Priority; got != 0 {
		t.Fatalf("user's rerun of a priority-50 run has priority %d, want 0", got)
	}
	if r := e.req("POST", "/api/tasks/"+urgent+"/rerun", alice, `{"priority":7}`); r.status != http.StatusForbidden {
		t.Fatalf("user's rerun with priority 7: %d %s, want 403", r.status, r.body)
	}
	sw := `{"base":{"command":["a"],"priority":3},"grid":{"seed":[1,2]}}`
	if r := e.req("POST", "/api/sweeps", alice, sw); r.status != http.StatusForbidden || r.errCode(t) != "forbidden" {
		t.Fatalf("user's sweep with priority 3: %d %s, want 403", r.status, r.body)
	}
}

// POST /api/tasks/{id}/priority: admins only, queued runs only, in range.
func TestPolicy_SetPriority(t *testing.T) {
	e := newEnv(t)
	root, _ := e.user("root")
	alice, _ := e.user("alice")
	id := e.submit(alice, `{"command":["a"]}`)

	set := func(tok, id string, body any, want int) resp {
		t.Helper()
		r := e.req("POST", "/api/tasks/"+id+"/priority", tok, body)
		if r.status != want {
			t.Fatalf("set priority of %s to %v: %d %s, want %d", id, body, r.status, r.body, want)
		}
		if want >= 400 {
			r.errCode(t)
		}
		return r
	}
	set(alice, id, `{"priority":5}`, http.StatusForbidden)
	set(root, id, `{"priority":1001}`, http.StatusBadRequest)
	set(root, id, `{"priority":"high"}`, http.StatusBadRequest)
	set(root, id, `{}`, http.StatusBadRequest)
	set(root, id, nil, http.StatusBadRequest)
	set(root, "r-missing", `{"priority":5}`, http.StatusNotFound)
	set(root, "bad..id", `{"priority":5}`, http.StatusBadRequest)
	r := set(root, id, `{"priority":9}`, http.StatusOK)
	var got core.Task
	mustJSON(t, r.body, &got)
	if got.ID != id || got.Priority != 9 || e.task(id).Priority != 9 {
		t.Fatalf("after set: answer %+v, stored %d", got, e.task(id).Priority)
	}
	if n, _ := e.ctl.calls(); n < 2 {
		t.Fatalf("the scheduler was not woken after the change (%d notifies)", n)
	}
	e.finish(id, core.StatusSucceeded)
	set(root, id, `{"priority":1}`, http.StatusConflict)
}

// GET /api/users/usage: every user, lowest usage first, with what they have
// active and their quota (DEFAULT_USER_GPU_QUOTA for those without one).
func TestPolicy_UsersUsage(t *testing.T) {
	e := newEnvWith(t, func(c *Config) { c.DefaultGPUQuota = 4; c.FairShareHalfLife = time.Hour })
	_, rootID := e.user("root")
	alice, aliceID := e.user("alice")
	if err := e.st.AddUsage(context.Background(), []store.UsageCharge{{UserID: rootID, GPUSeconds: 7200, At: e.clock.Now()}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	two := 2
	if err := e.st.SetQuota(context.Background(), aliceID, core.Quota{Runs: &two, GPUs: &two}); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(time.Hour) // one half-life
	r := e.req("GET", "/api/users/usage", alice, nil)
	if r.status != http.StatusOK {
		t.Fatalf("usage: %d %s", r.status, r.body)
	}
	var got struct {
		Items []core.UserUsage `json:"items"`
	}
	mustJSON(t, r.body, &got)
	if len(got.Items) != 2 || got.Items[0].User != "alice" || got.Items[1].User != "root" {
		t.Fatalf("items %s", r.body)
	}
	a, root := got.Items[0], got.Items[1]
	if a.Usage != 0 || *a.Quota.GPUs != 2 || *a.Quota.Runs != 2 {
		t.Fatalf("alice: %s", r.body)
	}
	if math.Abs(root.Usage-3600) > 0.01 || root.Quota.GPUs == nil || *root.Quota.GPUs != 4 || root.Quota.Runs != nil {
		t.Fatalf("root (7200 GPU-s an hour ago, half-life 1h, default quota 4): %s", r.body)
	}
	if r := e.req("GET", "/api/users/usage", "", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("without a token: %d", r.status)
	}
}

// The quota endpoints: admins only, 404 for an unknown user, 400 for
// negative or non-integer values naming the field; null is no cap.
func TestPolicy_Quotas(t *testing.T) {
	e := newEnv(t)
	root, _ := e.user("root")
	alice, _ := e.user("alice")
	put := func(tok, name string, body any, want int) resp {
		t.Helper()
		r := e.req("PUT", "/api/admin/quotas/"+name, tok, body)
		if r.status != want {
			t.Fatalf("PUT quota %s %v: %d %s, want %d", name, body, r.status, r.body, want)
		}
		if want >= 400 {
			r.errCode(t)
		}
		return r
	}
	put(alice, "alice", `{"gpus":8}`, http.StatusForbidden)
	put(root, "nobody", `{"gpus":1}`, http.StatusNotFound)
	if r := put(root, "alice", `{"gpus":-1}`, http.StatusBadRequest); !strings.Contains(string(r.body), "gpus") {
		t.Fatalf("400 does not name the field: %s", r.body)
	}
	if r := put(root, "alice", `{"runs":-3}`, http.StatusBadRequest); !strings.Contains(string(r.body), "runs") {
		t.Fatalf("400 does not name the field: %s", r.body)
	}
	put(root, "alice", `{"gpus":"many"}`, http.StatusBadRequest)
	put(root, "alice", nil, http.StatusBadRequest)
	r := put(root, "alice", `{"gpus":2,"runs":null}`, http.StatusOK)
	if string(r.body) != `{"user":"alice","gpus":2,"runs":null}` {
		t.Fatalf("answer %s", r.body)
	}
	if r := e.req("GET", "/api/admin/quotas", alice, nil); r.status != http.StatusForbidden {
		t.Fatalf("user lists quotas: %d", r.status)
	}
	r = e.req("GET", "/api/admin/quotas", root, nil)
	if r.status != http.StatusOK || string(r.body) != `{"items":[{"user":"root","gpus":null,"runs":null},{"user":"alice","gpus":2,"runs":null}]}` {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if n, _ := e.ctl.calls(); n == 0 {
		t.Fatal("a quota change did not wake the scheduler")
	}
}

// GET /api/queue lists the QUEUED runs in serving order with each one's
// position, code and reason; finished runs are not in it.
func TestPolicy_Queue(t *testing.T) {
	e := newEnv(t)
	root, _ := e.user("root")
	alice, _ := e.user("alice")
	e.ctl.mu.Lock()
	e.ctl.workers = []core.WorkerInfo{{ID: "w1", State: core.WorkerIdle, GPUs: []core.GPU{{Index: 0}}}}
	e.ctl.mu.Unlock()
	a1 := e.submit(alice, map[string]any{"command": []string{"x"}, "gpus": 1})
	big := e.submit(alice, map[string]any{"command": []string{"x"}, "gpus": 2})
	urgent := e.submit(root, map[string]any{"command": []string{"x"}, "gpus": 1, "priority": 5})
	e.finish(e.submit(alice, `{"command":["x"]}`), core.StatusSucceeded)

	r := e.req("GET", "/api/queue", alice, nil)
	if r.status != http.StatusOK {
		t.Fatalf("queue: %d %s", r.status, r.body)
	}
	var got struct {
		Items []core.QueueItem `json:"items"`
	}
	mustJSON(t, r.body, &got)
	want := []core.QueueItem{
		{ID: urgent, User: "root", GPUs: 1, Priority: 5, Position: 1, PendingReason: "starting on w1"},
		{ID: a1, User: "alice", GPUs: 1, Position: 2, PendingCode: "priority", PendingReason: "waiting behind 1 higher-priority run that takes the free GPUs"},
		{ID: big, User: "alice", GPUs: 2, Position: 3, PendingCode: "no_worker", PendingReason: "needs 2 GPUs, no worker has that many (the largest has 1)"},
	}
	if len(got.Items) != len(want) {
		t.Fatalf("items %s", r.body)
	}
	for i, w := range want {
		g := got.Items[i]
		g.Name, g.CreatedAt = "", ""
		if g != w {
			t.Errorf("item %d: got %+v\nwant %+v", i, g, w)
		}
	}
	if r := e.req("GET", "/api/queue?limit=0", alice, nil); r.status != http.StatusBadRequest {
		t.Fatalf("limit=0: %d", r.status)
	}
	if r := e.req("GET", "/api/queue?limit=1", alice, nil); r.status != http.StatusOK || strings.Count(string(r.body), `"id"`) != 1 {
		t.Fatalf("limit=1: %d %s", r.status, r.body)
	}
}

// preemptible and preemptGraceSeconds are kept, and a rerun repeats them;
// a grace over 600 s is 400 naming the field.
func TestPolicy_PreemptibleSubmission(t *testing.T) {
	e := newEnv(t)
	_, _ = e.user("root")
	alice, _ := e.user("alice")
	id := e.submit(alice, `{"command":["a"],"gpus":1,"preemptible":true,"preemptGraceSeconds":60}`)
	if got := e.task(id); !got.Preemptible || got.PreemptGraceSeconds != 60 || got.PreemptGrace() != time.Minute {
		t.Fatalf("stored %+v", got)
	}
	for _, body := range []string{`{"command":["a"],"preemptGraceSeconds":601}`, `{"command":["a"],"preemptGraceSeconds":-1}`} {
		r := e.req("POST", "/api/train", alice, body)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "preemptGraceSeconds") {
			t.Fatalf("%s: %d %s", body, r.status, r.body)
		}
	}
	r := e.req("POST", "/api/tasks/"+id+"/rerun", alice, nil)
	if r.status != http.StatusAccepted {
		t.Fatalf("rerun: %d %s", r.status, r.body)
	}
	if got := e.task(r.json(t)["id"].(string)); !got.Preemptible || got.PreemptGraceSeconds != 60 {
		t.Fatalf("rerun lost the preemption settings: %+v", got)
	}
	if got := e.task(e.submit(alice, `{"command":["a"]}`)); got.Preemptible || got.PreemptGrace() != core.DefaultPreemptGrace {
		t.Fatalf("default: %+v", got)
	}
}
