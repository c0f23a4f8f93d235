package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

func TestSubmit_Success(t *testing.T) {
	e := newEnv(t)
	_, _ = e.user("root")
	tok, uid := e.user("alice")

	f := func(body string, want core.Task) {
		t.Helper()
		id := e.submit(tok, body)
		got := e.task(id)
		if got.UserID != uid || got.User != "alice" {
			t.Fatalf("%s: owner %d/%q, want the token's user %d/alice", body, got.UserID, got.User, uid)
		}
		if got.Status != core.StatusQueued || got.Attempt != 1 || !core.ValidTraceID(got.TraceID) {
			t.Fatalf("%s: status %s attempt %d trace %q", body, got.Status, got.Attempt, got.TraceID)
		}
		if !reflect.DeepEqual(got.Command, want.Command) {
			t.Fatalf("%s: command %q, want %q", body, got.Command, want.Command)
		}
		if want.Name != "" && got.Name != want.Name {
			t.Fatalf("%s: name %q, want %q", body, got.Name, want.Name)
		}
		if got.MaxRetries != want.MaxRetries || got.GPUs != want.GPUs || got.Priority != want.Priority {
			t.Fatalf("%s: retries/gpus/priority %d/%d/%d, want %d/%d/%d", body,
				got.MaxRetries, got.GPUs, got.Priority, want.MaxRetries, want.GPUs, want.Priority)
		}
	}
	// userId in the body is ignored.
	f(`{"command":["python3","train.py"],"userId":1,"user":"root"}`,
		core.Task{Command: []string{"python3", "train.py"}, Name: "python3 train.py", MaxRetries: 1})
	// algorithm → the default trainer's argv; episodes default 200.
	f(`{"algorithm":"ppo"}`,
		core.Task{Command: []string{"python3", "-u", "@scripts/train.py", "--algo", "ppo", "--episodes", "200"}, Name: "ppo", MaxRetries: 1})
	f(`{"algorithm":"dqn","episodes":50,"learningRate":0.0005,"gpus":2,"priority":-5,"maxRetries":0}`,
		core.Task{Command: []string{"python3", "-u", "@scripts/train.py", "--algo", "dqn", "--episodes", "50", "--lr", "0.0005"},
			GPUs: 2, Priority: -5, MaxRetries: 0})
	// params → --key value, in the object's order; strings as is, others as JSON text.
	f(`{"command":["./run"],"params":{"gamma":0.99,"env":"CartPole-v1","double":true,"layers":[64,64]},"name":"mine"}`,
		core.Task{Command: []string{"./run", "--gamma", "0.99", "--env", "CartPole-v1", "--double", "true", "--layers", "[64,64]"},
			Name: "mine", MaxRetries: 1})
	f(`{"algorithm":"a2c","episodes":1000000,"params":{"seed":7},"gpus":64,"priority":-1000,"maxRetries":100,"timeoutSeconds":3600}`,
		core.Task{Command: []string{"python3", "-u", "@scripts/train.py", "--algo", "a2c", "--episodes", "1000000", "--seed", "7"},
			GPUs: 64, Priority: -1000, MaxRetries: 100})

	if n, _ := e.ctl.calls(); n != 5 {
		t.Fatalf("Notify called %d times, want 5", n)
	}

	// The stored run comes back through the API with [] and {} for empty fields.
	id := e.submit(tok, `{"command":["x"]}`)
	r := e.req("GET", "/api/tasks/"+id, tok, nil)
	if r.status != http.StatusOK {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	for _, want := range []string{`"command":["x"]`, `"tags":[]`, `"gpuIndices":[]`, `"env":{}`, `"params":{}`, `"user":"alice"`} {
		if !strings.Contains(string(r.body), want) {
			t.Fatalf("task JSON lacks %s: %s", want, r.body)
		}
	}
	id = e.submit(tok, `{"command":["x"],"env":{"SEED":"1","_X":""},"tags":["a","b"],"workdir":"/tmp","project":"p","code":{"gitCommit":"abc123","gitDirty":true}}`)
	got := e.task(id)
	if got.Env["SEED"] != "1" || len(got.Tags) != 2 || got.Workdir != "/tmp" || got.Project != "p" || got.Code.GitCommit != "abc123" || !got.Code.GitDirty {
		t.Fatalf("fields not stored: %+v", got)
	}
}

func TestSubmit_Failure(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	f := func(body, wantInMessage string) {
		t.Helper()
		r := e.req("POST", "/api/train", tok, body)
		if r.status != http.StatusBadRequest || r.errCode(t) != "bad_request" {
			t.Fatalf("%.80s: want 400, got %d %s", body, r.status, r.body)
		}
		if !strings.Contains(string(r.body), wantInMessage) {
			t.Fatalf("%.80s: message should mention %q: %s", body, wantInMessage, r.body)
		}
	}
	// Malformed JSON and wrong types.
	f(`{"command":["a"]`, "malformed JSON")
	f(`{"command":["a"]} x`, "malformed JSON")
	f(`not json`, "malformed JSON")
	f(``, "command")
	f(`null`, "command")
	f(`[]`, "object")
	f(`"str"`, "object")
	f(`{"command":"python3 train.py"}`, "command")
	f(`{"command":[1,2]}`, "command")
	f(`{"algorithm":7}`, "algorithm")
	f(`{"algorithm":"ppo","episodes":"200"}`, "episodes")
	f(`{"algorithm":"ppo","episodes":1.5}`, "episodes")
	f(`{"algorithm":"ppo","learningRate":"fast"}`, "learningRate")
	f(`{"command":["a"],"gpus":"2"}`, "gpus")
	f(`{"command":["a"],"gpus":1e30}`, "gpus")
	f(`{"command":["a"],"priority":true}`, "priority")
	f(`{"command":["a"],"maxRetries":{}}`, "maxRetries")
	f(`{"command":["a"],"timeoutSeconds":"1h"}`, "timeoutSeconds")
	f(`{"command":["a"],"env":["A=1"]}`, "env")
	f(`{"command":["a"],"env":{"A":1}}`, "env")
	f(`{"command":["a"],"tags":"x"}`, "tags")
	f(`{"command":["a"],"name":5}`, "name")
	// Values out of range.
	f(`{}`, "command")
	f(`{"command":["a"],"algorithm":"ppo"}`, "either")
	f(`{"command":[]}`, "command")
	f(`{"command":[""]}`, "command")
	f(`{"command":["a","b\u0000c"]}`, "NUL")
	f(`{"algorithm":""}`, "algorithm")
	f(`{"algorithm":"ppo; rm -rf /"}`, "algorithm")
	f(`{"algorithm":"`+strings.Repeat("a", 33)+`"}`, "algorithm")
	f(`{"algorithm":"ppo","episodes":0}`, "episodes")
	f(`{"algorithm":"ppo","episodes":-1}`, "episodes")
	f(`{"algorithm":"ppo","episodes":1000001}`, "episodes")
	f(`{"algorithm":"ppo","learningRate":-0.1}`, "learningRate")
	f(`{"command":["a"],"episodes":10}`, "episodes")
	f(`{"command":["a"],"gpus":-1}`, "gpus")
	f(`{"command":["a"],"gpus":65}`, "gpus")
	f(`{"command":["a"],"priority":1001}`, "priority")
	f(`{"command":["a"],"priority":-1001}`, "priority")
	f(`{"command":["a"],"maxRetries":-1}`, "maxRetries")
	f(`{"command":["a"],"maxRetries":101}`, "maxRetries")
	f(`{"command":["a"],"timeoutSeconds":-1}`, "timeoutSeconds")
	f(`{"command":["a"],"env":{"1BAD":"x"}}`, "env")
	f(`{"command":["a"],"env":{"A-B":"x"}}`, "env")
	f(`{"command":["a"],"env":{"":"x"}}`, "env")
	f(`{"command":["a"],"env":{"RLSCHED_TASK_ID":"x"}}`, "RLSCHED_TASK_ID")
	f(`{"command":["a"],"env":{"CUDA_VISIBLE_DEVICES":"0,1"}}`, "CUDA_VISIBLE_DEVICES")
	f(`{"command":["a"],"env":{"A":"x\u0000y"}}`, "NUL")
	f(`{"command":["a"],"workdir":"exp/run1"}`, "absolute")
	f(`{"command":["a"],"env":{"LD_AUDIT":"/tmp/x.so"}}`, "LD_AUDIT")
	f(`{"command":["a"],"name":"`+strings.Repeat("n", 201)+`"}`, "name")
	f(`{"command":["a"],"tags":[`+strings.TrimSuffix(strings.Repeat(`"t",`, 33), ",")+`]}`, "tags")
	f(`{"command":["a"],"params":[1,2]}`, "params")
	f(`{"command":["a"],"params":"lr=1"}`, "params")
	f(`{"command":["a"],"params":5}`, "params")
	f(`{"command":["a"],"params":{"-x":1}}`, "params")
	f(`{"command":["a"],"params":{"a b":1}}`, "params")
	f(`{"command":["a"],"params":{"lr":1,"lr":2}}`, "twice")
	f(`{"command":["a"],"params":{"s":"a\u0000b"}}`, "NUL")
	if n, _ := e.ctl.calls(); n != 0 {
		t.Fatalf("Notify called %d times for refused submissions", n)
	}

	// A body over 1 MiB: 413 in the API's error shape, and the connection
	// stays usable.
	big := `{"command":["a"],"name":"` + strings.Repeat("x", MaxBodySize) + `"}`
	for _, path := range []string{"/api/train", "/api/auth/register", "/api/nope"} {
		r := e.req("POST", path, tok, big)
		if r.status != http.StatusRequestEntityTooLarge || r.errCode(t) != "payload_too_large" {
			t.Fatalf("big body to %s: %d %s", path, r.status, r.body)
		}
	}
	if r := e.req("POST", "/api/train", tok, strings.Repeat(" ", MaxBodySize-20)+`{"command":["a"]}`); r.status != http.StatusAccepted {
		t.Fatalf("a body of just under 1 MiB: %d %s", r.status, r.body)
	}
}

func TestTasks_ListAndFilters(t *testing.T) {
	e := newEnv(t)
	atok, _ := e.user("root")
	btok, _ := e.user("bob")
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, e.submit(atok, `{"command":["a"],"project":"p1"}`))
	}
	bobID := e.submit(btok, `{"command":["b"],"project":"p2"}`)
	e.finish(ids[0], core.StatusSucceeded)

	list := func(q string) ([]string, string) {
		t.Helper()
		r := e.req("GET", "/api/tasks"+q, btok, nil)
		if r.status != http.StatusOK {
			t.Fatalf("list %s: %d %s", q, r.status, r.body)
		}
		var b struct {
			Items      []core.Task `json:"items"`
			NextCursor *string     `json:"nextCursor"`
		}
		mustJSON(t, r.body, &b)
		if b.Items == nil || b.NextCursor == nil {
			t.Fatalf("list %s: items and nextCursor must be present: %s", q, r.body)
		}
		var out []string
		for _, it := range b.Items {
			out = append(out, it.ID)
		}
		return out, *b.NextCursor
	}
	all, next := list("")
	if len(all) != 6 || next != "" || all[0] != bobID {
		t.Fatalf("list all: %v next %q (newest first, bob's last submitted)", all, next)
	}
	// Pagination with limit and cursor.
	var paged []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		q := "?limit=2"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		got, nc := list(q)
		if len(got) > 2 {
			t.Fatalf("page of %d items with limit 2", len(got))
		}
		paged = append(paged, got...)
		if nc == "" {
			break
		}
		cursor = nc
	}
	if !reflect.DeepEqual(paged, all) {
		t.Fatalf("pages %v differ from the full list %v", paged, all)
	}
	if got, _ := list("?user=bob"); len(got) != 1 || got[0] != bobID {
		t.Fatalf("user=bob: %v", got)
	}
	if got, _ := list("?project=p1"); len(got) != 5 {
		t.Fatalf("project=p1: %v", got)
	}
	if got, _ := list("?status=SUCCEEDED"); len(got) != 1 || got[0] != ids[0] {
		t.Fatalf("status=SUCCEEDED: %v", got)
	}
	if got, _ := list("?status=queued&project=p1"); len(got) != 4 {
		t.Fatalf("status=queued&project=p1: %v", got)
	}
	if got, _ := list("?limit=100000"); len(got) != 6 {
		t.Fatalf("a limit over 500 is clamped: %v", got)
	}

	bad := func(q string) {
		t.Helper()
		r := e.req("GET", "/api/tasks"+q, btok, nil)
		if r.status != http.StatusBadRequest || r.errCode(t) != "bad_request" {
			t.Fatalf("list %s: want 400, got %d %s", q, r.status, r.body)
		}
	}
	bad("?status=DONE")
	bad("?limit=0")
	bad("?limit=-3")
	bad("?limit=ten")
	bad("?cursor=garbage")
	bad("?cursor=" + strings.Repeat("A", 2000))
}

func TestTasks_GetAndBadIDs(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	f := func(method, path string, want int) {
		t.Helper()
		r := e.req(method, path, tok, nil)
		if r.status != want {
			t.Fatalf("%s %s: want %d, got %d %s", method, path, want, r.status, r.body)
		}
		if want >= 400 {
			r.errCode(t)
		}
	}
	long := strings.Repeat("a", 1000)
	for _, p := range []string{"", "/cancel", "/rerun", "/metrics", "/artifacts"} {
		method := "GET"
		if p == "/cancel" || p == "/rerun" {
			method = "POST"
		}
		f(method, "/api/tasks/..%2F..%2Fetc%2Fpasswd"+p, 400)
		f(method, "/api/tasks/..%2F.."+p, 400)
		f(method, "/api/tasks/%00"+p, 400)
		f(method, "/api/tasks/a%00b"+p, 400)
		f(method, "/api/tasks/"+long+p, 400)
		f(method, "/api/tasks/has%20space"+p, 400)
		f(method, "/api/tasks/r-unknown"+p, 404)
	}
	f("GET", "/api/tasks/../../etc/passwd", 400)
	f("GET", "/api/tasks/", 400)
	f("GET", "/api/tasks/ok/bogus", 404)
	f("GET", "/api/tasks/ok/artifacts/model.pt", 404)
	f("GET", "/api/nope", 404)
	f("GET", "/no-such-page", 404)
	f("DELETE", "/api/tasks", 405)
	f("GET", "/api/train", 405)
	f("POST", "/api/tasks/ok", 405)
	f("GET", "/api/tasks/ok/cancel", 405)

	id := e.submit(tok, `{"command":["a"]}`)
	r := e.req("GET", "/api/tasks/"+id, tok, nil)
	var got core.Task
	mustJSON(t, r.body, &got)
	if r.status != 200 || got.ID != id || got.Status != core.StatusQueued {
		t.Fatalf("get %s: %d %s", id, r.status, r.body)
	}
	r = e.req("GET", "/api/tasks/"+id+"/artifacts", tok, nil)
	if r.status != 200 || string(r.body) != `{"items":[]}` {
		t.Fatalf("artifacts: %d %s", r.status, r.body)
	}
	r = e.req("PUT", "/api/train", tok, nil)
	if r.status != 405 || r.errCode(t) != "method_not_allowed" || r.header.Get("Allow") != "POST" {
		t.Fatalf("405 shape: %d %v %s", r.status, r.header, r.body)
	}
}

func TestTasks_Cancel(t *testing.T) {
	e := newEnv(t)
	admin, _ := e.user("root")
	alice, _ := e.user("alice")
	bob, _ := e.user("bob")

	f := func(token, id string, want int) core.Task {
		t.Helper()
		r := e.req("POST", "/api/tasks/"+id+"/cancel", token, nil)
		if r.status != want {
			t.Fatalf("cancel %s: want %d, got %d %s", id, want, r.status, r.body)
		}
		var got core.Task
		if want == http.StatusAccepted {
			mustJSON(t, r.body, &got)
		} else {
			r.errCode(t)
		}
		return got
	}
	a1 := e.submit(alice, `{"command":["a"]}`)
	a2 := e.submit(alice, `{"command":["a"]}`)
	f(bob, a1, http.StatusForbidden)
	if _, c := e.ctl.calls(); len(c) != 0 {
		t.Fatalf("Cancel reached the dispatcher for a non-owner: %v", c)
	}
	if got := f(alice, a1, http.StatusAccepted); got.ID != a1 || got.Status != core.StatusCancelled {
		t.Fatalf("owner cancel: %+v", got)
	}
	if got := f(admin, a2, http.StatusAccepted); got.Status != core.StatusCancelled {
		t.Fatalf("admin cancel: %+v", got)
	}
	f(alice, a1, http.StatusConflict)
	a3 := e.submit(alice, `{"command":["a"]}`)
	e.finish(a3, core.StatusFailed)
	f(alice, a3, http.StatusConflict)
	f(alice, "r-missing", http.StatusNotFound)
	if _, c := e.ctl.calls(); !reflect.DeepEqual(c, []string{a1, a2}) {
		t.Fatalf("dispatcher Cancel calls %v, want [%s %s]", c, a1, a2)
	}
}

func TestTasks_Rerun(t *testing.T) {
	e := newEnv(t)
	_, _ = e.user("root")
	alice, _ := e.user("alice")
	bob, bobID := e.user("bob")

	orig := e.submit(alice, `{"algorithm":"ppo","episodes":100,"learningRate":0.001,"params":{"gamma":0.99},
		"gpus":1,"priority":-3,"maxRetries":2,"env":{"SEED":"7"},"tags":["x"],"workdir":"/w","timeoutSeconds":60,
		"project":"cartpole","name":"first","code":{"gitCommit":"c0ffee"}}`)
	o := e.task(orig)

	rerun := func(token, id, body string) core.Task {
		t.Helper()
		var b any
		if body != "" {
			b = body
		}
		r := e.req("POST", "/api/tasks/"+id+"/rerun", token, b)
		if r.status != http.StatusAccepted {
			t.Fatalf("rerun %s %s: %d %s", id, body, r.status, r.body)
		}
		m := r.json(t)
		if m["status"] != "QUEUED" || m["rerunOf"] != id {
			t.Fatalf("rerun answer: %s", r.body)
		}
		return e.task(m["id"].(string))
	}

	// Same spec, new owner; another user's env values are not copied
	// (issue 12: they are the owner's to see).
	n := rerun(bob, orig, "")
	if n.ID == orig || n.UserID != bobID || n.User != "bob" || n.Status != core.StatusQueued || n.Attempt != 1 {
		t.Fatalf("rerun identity: %+v", n)
	}
	if !reflect.DeepEqual(n.Command, o.Command) || string(n.Params) != string(o.Params) || n.GPUs != 1 || n.Priority != -3 ||
		n.MaxRetries != 2 || len(n.Env) != 0 || !reflect.DeepEqual(n.Tags, []string{"x"}) || n.Workdir != "/w" ||
		n.TimeoutSeconds != 60 || n.Project != "cartpole" || n.Name != "first" || n.Code.GitCommit != "c0ffee" {
		t.Fatalf("rerun spec differs:\n orig %+v\n new  %+v", o, n)
	}
	wantCmd := []string{"python3", "-u", "@scripts/train.py", "--algo", "ppo", "--episodes", "100", "--lr", "0.001", "--gamma", "0.99"}
	if !reflect.DeepEqual(n.Command, wantCmd) {
		t.Fatalf("command %q, want %q", n.Command, wantCmd)
	}

	// Overrides: episodes on an algorithm run, params replaced, not appended twice.
	n = rerun(alice, orig, `{"episodes":500,"params":{"gamma":0.9,"seed":1},"priority":-1,"userId":1}`)
	wantCmd = []string{"python3", "-u", "@scripts/train.py", "--algo", "ppo", "--episodes", "500", "--lr", "0.001", "--gamma", "0.9", "--seed", "1"}
	if !reflect.DeepEqual(n.Command, wantCmd) || n.Priority != -1 || n.GPUs != 1 || n.User != "alice" {
		t.Fatalf("rerun with overrides: %q %+v", n.Command, n)
	}
	// A command override keeps the params.
	n = rerun(alice, orig, `{"command":["./other"],"gpus":0}`)
	if !reflect.DeepEqual(n.Command, []string{"./other", "--gamma", "0.99"}) || n.GPUs != 0 || n.Name != "first" {
		t.Fatalf("command override: %q %+v", n.Command, n)
	}
	// Empty params drop them.
	n = rerun(alice, orig, `{"params":{}}`)
	if !reflect.DeepEqual(n.Command, []string{"python3", "-u", "@scripts/train.py", "--algo", "ppo", "--episodes", "100", "--lr", "0.001"}) {
		t.Fatalf("params {} override: %q", n.Command)
	}
	// Rerun of a command run; episodes can't apply.
	cmdRun := e.submit(alice, `{"command":["./x","--flag"],"params":{"a":"b"}}`)
	n = rerun(alice, cmdRun, `{}`)
	if !reflect.DeepEqual(n.Command, []string{"./x", "--flag", "--a", "b"}) {
		t.Fatalf("rerun of a command run: %q", n.Command)
	}
	bad := func(id, body string, want int) {
		t.Helper()
		r := e.req("POST", "/api/tasks/"+id+"/rerun", alice, body)
		if r.status != want {
			t.Fatalf("rerun %s %s: want %d, got %d %s", id, body, want, r.status, r.body)
		}
		r.errCode(t)
	}
	bad(cmdRun, `{"episodes":5}`, 400)
	bad(orig, `{"gpus":"x"}`, 400)
	bad(orig, `{"gpus":99}`, 400)
	bad(orig, `{broken`, 400)
	bad("r-missing", ``, 404)
	if n, _ := e.ctl.calls(); n != 7 {
		t.Fatalf("Notify called %d times, want 7", n)
	}
}

func TestTasks_Metrics(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	id := e.submit(tok, `{"command":["a"]}`)
	err := e.st.AppendMetrics(context.Background(), id, []core.MetricPoint{
		{Step: 1, Name: "reward", Value: 1.5}, {Step: 2, Name: "reward", Value: 2.5, Time: 1_700_000_000_123}, {Step: 1, Name: "loss", Value: 0.3},
	})
	if err != nil {
		t.Fatalf("append metrics: %v", err)
	}
	get := func(q string) map[string][][2]float64 {
		t.Helper()
		r := e.req("GET", "/api/tasks/"+id+"/metrics"+q, tok, nil)
		if r.status != http.StatusOK {
			t.Fatalf("metrics%s: %d %s", q, r.status, r.body)
		}
		var b struct {
			TaskID string                  `json:"taskId"`
			Series map[string][][2]float64 `json:"series"`
		}
		mustJSON(t, r.body, &b)
		if b.TaskID != id || b.Series == nil {
			t.Fatalf("metrics body: %s", r.body)
		}
		return b.Series
	}
	if s := get(""); len(s) != 2 || !reflect.DeepEqual(s["reward"], [][2]float64{{1, 1.5}, {2, 2.5}}) {
		t.Fatalf("all series: %v", s)
	}
	if s := get("?names=loss,%20nothing,"); len(s["loss"]) != 1 || len(s["reward"]) != 0 {
		t.Fatalf("names=loss: %v", s)
	}
	if r := e.req("GET", "/api/tasks/r-missing/metrics", tok, nil); r.status != http.StatusNotFound {
		t.Fatalf("metrics of a missing run: %d", r.status)
	}
	// Times only on request (issue 30): [step, value, t], t null when none.
	raw := func(q string) string {
		t.Helper()
		r := e.req("GET", "/api/tasks/"+id+"/metrics"+q, tok, nil)
		if r.status != http.StatusOK {
			t.Fatalf("metrics%s: %d %s", q, r.status, r.body)
		}
		var b struct {
			Series map[string]json.RawMessage `json:"series"`
		}
		mustJSON(t, r.body, &b)
		return string(b.Series["reward"])
	}
	if got := raw("?names=reward"); got != `[[1,1.5],[2,2.5]]` {
		t.Fatalf("pairs: %s", got)
	}
	for _, q := range []string{"?names=reward&times=false", ""} {
		if got := raw(q); got != `[[1,1.5],[2,2.5]]` {
			t.Fatalf("metrics%s: %s", q, got)
		}
	}
	if got := raw("?names=reward&times=true"); got != `[[1,1.5,null],[2,2.5,1700000000123]]` {
		t.Fatalf("times=true: %s", got)
	}
	for _, q := range []string{"?times=1", "?times=yes"} {
		r := e.req("GET", "/api/tasks/"+id+"/metrics"+q, tok, nil)
		if r.status != http.StatusBadRequest {
			t.Fatalf("metrics%s: %d %s", q, r.status, r.body)
		}
		r.errCode(t)
	}
	if r := e.req("GET", "/api/tasks/r-missing/metrics?times=true", tok, nil); r.status != http.StatusNotFound {
		t.Fatalf("timed metrics of a missing run: %d", r.status)
	}
}

func TestTraceID(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	f := func(sent string, echoed bool) {
		t.Helper()
		var hdr []string
		if sent != "" {
			hdr = []string{"X-Trace-Id", sent}
		}
		r := e.req("GET", "/api/tasks/r-missing", tok, nil, hdr...)
		got := r.header.Get("X-Trace-Id")
		if echoed && got != sent {
			t.Fatalf("trace %q not echoed: %q", sent, got)
		}
		if !echoed && (got == sent || len(got) != 32) {
			t.Fatalf("trace %q: want a new 32-hex id, got %q", sent, got)
		}
		r.errCode(t) // the error body carries the same id
	}
	f("abc-123_X", true)
	f(strings.Repeat("a", 64), true)
	f("", false)
	f("has space", false)
	f("semi;colon", false)
	f(strings.Repeat("a", 65), false)

	// A submission records the request's trace id.
	r := e.req("POST", "/api/train", tok, `{"command":["a"]}`, "X-Trace-Id", "submit-trace")
	var b map[string]string
	_ = json.Unmarshal(r.body, &b)
	if b["traceId"] != "submit-trace" || e.task(b["id"]).TraceID != "submit-trace" {
		t.Fatalf("submission trace: %s", r.body)
	}
}
