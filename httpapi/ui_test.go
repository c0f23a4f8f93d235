package httpapi

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
)

// The dashboard's pages and files are public; every client-side route
// answers index.html, and nothing outside the embedded files is reachable.
func TestUI_PagesAndFiles(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"/", "/login", "/runs", "/runs/r-abc_123", "/submit", "/compare", "/workers", "/health", "/compare?ids=a,b"} {
		r := e.req("GET", p, "", nil)
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") ||
			!strings.Contains(string(r.body), `<script type="module" src="/static/js/app.js">`) {
			t.Fatalf("GET %s: %d %s %.80q", p, r.status, r.header.Get("Content-Type"), r.body)
		}
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: CSP %q", p, csp)
		}
		if r.header.Get("X-Frame-Options") != "DENY" || r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: headers %v", p, r.header)
		}
	}
	for p, ct := range map[string]string{
		"/static/js/app.js":         "text/javascript",
		"/static/js/pages/runs.js":  "text/javascript",
		"/static/style.css":         "text/css",
		"/static/favicon.svg":       "image/svg+xml",
		"/static/js/logview.js":     "text/javascript",
		"/static/js/%61pp.js":       "text/javascript", // escapes are undone per segment
		"/static/js/pages/login.js": "text/javascript",
	} {
		r := e.req("GET", p, "", nil)
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), ct) || len(r.body) == 0 {
			t.Errorf("GET %s: %d %s", p, r.status, r.header.Get("Content-Type"))
		}
	}
	for _, p := range []string{"/static/", "/static/nope.js", "/static/index.html", "/static/../ui.go",
		"/static/..%2Fui.go", "/static/js/../../ui.go", "/runs/a/b", "/runs/bad%20id", "/nope", "/index.html", "/ui/index.html"} {
		r := e.req("GET", p, "", nil)
		if r.status != 404 && r.status != 400 {
			t.Errorf("GET %s: %d, want 404 (or 400)", p, r.status)
			continue
		}
		r.errCode(t)
	}
	// A browser's unknown page is the dashboard's "Page not found", still
	// a 404; a script asking the same gets the JSON error.
	for _, p := range []string{"/nope", "/runs/a/b", "/settings/x"} {
		r := e.req("GET", p, "", nil, "Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
		if r.status != 404 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") ||
			!strings.Contains(string(r.body), `src="/static/js/app.js"`) || r.header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("a browser's GET %s: %d %s %.80q", p, r.status, r.header.Get("Content-Type"), r.body)
		}
	}
	for _, p := range []string{"/api/nope", "/static/nope.js"} {
		if r := e.req("GET", p, "", nil, "Accept", "text/html"); r.status != 404 && r.status != 401 || strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
			t.Errorf("a browser's GET %s: %d %s, want the API's JSON", p, r.status, r.header.Get("Content-Type"))
		}
	}
	if r := e.req("POST", "/runs", "", nil); r.status != 405 {
		t.Errorf("POST /runs: %d, want 405", r.status)
	}
	// API paths stay the API's: JSON errors, authentication.
	if r := e.req("GET", "/api/tasks", "", nil); r.status != 401 {
		t.Errorf("GET /api/tasks without a token: %d", r.status)
	}
}

// Browsers revalidate (no-cache) and get 304 for an unchanged file.
func TestUI_ETag(t *testing.T) {
	e := newEnv(t)
	r := e.req("GET", "/static/js/app.js", "", nil)
	tag := r.header.Get("ETag")
	if r.status != 200 || tag == "" || r.header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("first GET: %d etag %q cache %q", r.status, tag, r.header.Get("Cache-Control"))
	}
	r = e.req("GET", "/static/js/app.js", "", nil, "If-None-Match", tag)
	if r.status != 304 || len(r.body) != 0 {
		t.Fatalf("conditional GET: %d (%d bytes), want 304", r.status, len(r.body))
	}
	r = e.req("GET", "/static/js/app.js", "", nil, "If-None-Match", `"other", W/`+tag)
	if r.status != 304 {
		t.Fatalf("conditional GET with a list: %d, want 304", r.status)
	}
	r = e.req("GET", "/static/js/app.js", "", nil, "If-None-Match", `"stale"`)
	if r.status != 200 {
		t.Fatalf("stale conditional GET: %d, want 200", r.status)
	}
}

// Every module the dashboard imports is embedded (a typo in an import path
// would break the whole page in a browser).
func TestUI_ImportsResolve(t *testing.T) {
	for name, f := range uiFiles {
		if !strings.HasSuffix(name, ".js") {
			continue
		}
		dir := name[:strings.LastIndex(name, "/")+1]
		for _, line := range strings.Split(string(f.body), "\n") {
			line = strings.TrimSpace(line)
			// An import's first line, or the last of one over several lines
			// ("  toast } from '../util.js';"); not a string that says from.
			if !strings.HasPrefix(line, "import ") && !strings.Contains(line, "} from '") {
				continue
			}
			i := strings.Index(line, "from '")
			if i < 0 {
				continue
			}
			spec := line[i+6:]
			spec = spec[:strings.IndexByte(spec, '\'')]
			target := resolveImport(dir, spec)
			if _, ok := uiFiles[target]; !ok {
				t.Errorf("%s imports %s (%s), which is not embedded", name, spec, target)
			}
		}
	}
}

func resolveImport(dir, spec string) string {
	parts := strings.Split(strings.TrimSuffix(dir, "/"), "/")
	if dir == "" {
		parts = nil
	}
	for _, p := range strings.Split(spec, "/") {
		switch p {
		case ".":
		case "..":
			if len(parts) > 0 {
				parts = parts[:len(parts)-1]
			}
		default:
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "/")
}

// queueTask is the part of a Task the queue tests read.
type queueTask struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	QueuePosition int    `json:"queuePosition"`
	PendingReason string `json:"pendingReason"`
	PendingCode   string `json:"pendingCode"`
}

// Explain makes the test Control explain the queue with the scheduler's
// planner, over the workers the test sets.
func (c *testControl) Explain(ctx context.Context, _ []core.Task) map[string]core.QueueInfo {
	queue, err := c.st.QueuedTasks(ctx, 2000)
	if err != nil {
		return nil
	}
	var snap plan.Snapshot
	for _, w := range c.Workers() {
		if w.State != core.WorkerIdle && w.State != core.WorkerRunning {
			continue
		}
		snap.Connected++
		snap.MaxGPUs, snap.MaxSlots = max(snap.MaxGPUs, len(w.GPUs)), max(snap.MaxSlots, w.Slots)
		free := plan.Worker{ID: w.ID, FreeSlots: w.Slots, FreeCPUMillis: plan.Unlimited, FreeMemoryMB: plan.Unlimited}
		if w.CPUs > 0 {
			free.FreeCPUMillis = core.CPUMillis(w.CPUs - w.CPUsUsed)
		}
		if w.MemoryMB > 0 {
			free.FreeMemoryMB = w.MemoryMB - w.MemoryMBUsed
		}
		onGPU := map[string]bool{}
		for _, g := range w.GPUs {
			if g.TaskID == "" {
				free.FreeGPUs = append(free.FreeGPUs, g.Index)
			}
			onGPU[g.TaskID] = true
		}
		for _, id := range w.RunningTasks {
			if !onGPU[id] {
				free.FreeSlots--
			}
		}
		snap.Free = append(snap.Free, free)
	}
	return plan.Plan(snap, queue).Waiting
}

// The REST layer puts the explainer's positions, reasons and codes into
// QUEUED runs only, in listings and single runs alike.
func TestQueue_ExplainsQueuedRuns(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	e.ctl.mu.Lock()
	e.ctl.workers = []core.WorkerInfo{{
		ID: "w1", State: core.WorkerRunning, Slots: 1, RunningTasks: []string{"busy-gpu", "busy-cpu"},
		GPUs: []core.GPU{{Index: 0, TaskID: "busy-gpu"}, {Index: 1}},
	}}
	e.ctl.mu.Unlock()

	// The store stamps CreatedAt with its own wall clock, not the server's
	// injected one, so only time passing orders these submissions.
	big := e.submit(tok, map[string]any{"command": []string{"x"}, "gpus": 2})
	time.Sleep(5 * time.Millisecond)
	huge := e.submit(tok, map[string]any{"command": []string{"x"}, "gpus": 4})
	time.Sleep(5 * time.Millisecond)
	one := e.submit(tok, map[string]any{"command": []string{"x"}, "gpus": 1})
	time.Sleep(5 * time.Millisecond)
	cpu := e.submit(tok, map[string]any{"command": []string{"x"}})
	urgent := e.submit(tok, map[string]any{"command": []string{"x"}, "gpus": 1, "priority": 5})
	done := e.submit(tok, map[string]any{"command": []string{"x"}})
	e.finish(done, core.StatusSucceeded)

	r := e.req("GET", "/api/tasks?limit=50", tok, nil)
	var list struct {
		Items []queueTask `json:"items"`
	}
	mustJSON(t, r.body, &list)
	got := map[string]queueTask{}
	for _, it := range list.Items {
		got[it.ID] = it
	}
	want := []struct {
		id     string
		pos    int
		reason string
		code   string
	}{
		{urgent, 1, "starting on w1", ""},                                                     // priority first; takes the free GPU
		{big, 2, "needs 2 GPUs, the largest free block is 1", "resources"},                    // GPU 1 is free now
		{huge, 3, "needs 4 GPUs, no worker has that many (the largest has 2)", "no_worker"},   // can never fit
		{one, 4, "waiting behind 1 higher-priority run that takes the free GPUs", "priority"}, // GPU 1 went to urgent
		{cpu, 5, "needs a CPU slot, every slot is busy", "resources"},                         // the only slot is busy
	}
	for _, w := range want {
		g := got[w.id]
		if g.Status != "QUEUED" || g.QueuePosition != w.pos || g.PendingReason != w.reason || g.PendingCode != w.code {
			t.Errorf("run %s: position %d reason %q code %q; want %d, %q and %q", w.id, g.QueuePosition, g.PendingReason, g.PendingCode, w.pos, w.reason, w.code)
		}
	}
	if g := got[done]; g.QueuePosition != 0 || g.PendingReason != "" || g.PendingCode != "" {
		t.Errorf("a finished run is explained: %+v", g)
	}
	if strings.Contains(string(r.body), `"queuePosition":0`) || strings.Contains(string(r.body), `"pendingCode":""`) {
		t.Errorf("an empty queuePosition or pendingCode is sent; it must be omitted: %s", r.body)
	}
	// GET /api/tasks/{id} explains too.
	r = e.req("GET", "/api/tasks/"+huge, tok, nil)
	var one1 queueTask
	mustJSON(t, r.body, &one1)
	if one1.QueuePosition != 3 || !strings.Contains(one1.PendingReason, "the largest has 2") || one1.PendingCode != "no_worker" {
		t.Errorf("GET one run: %s", r.body)
	}
}

func TestQueue_NoWorkers(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	id := e.submit(tok, map[string]any{"command": []string{"x"}})
	r := e.req("GET", "/api/tasks/"+id, tok, nil)
	var q queueTask
	mustJSON(t, r.body, &q)
	if q.QueuePosition != 1 || q.PendingReason != "no worker is connected" || q.PendingCode != "no_worker" {
		t.Errorf("got %s", r.body)
	}
}

// explainControl is a Control that explains the queue itself.
type explainControl struct {
	*testControl
	calls [][]string
}

func (c *explainControl) Explain(_ context.Context, queued []core.Task) map[string]core.QueueInfo {
	var ids []string
	out := map[string]core.QueueInfo{}
	for i, t := range queued {
		ids = append(ids, t.ID)
		out[t.ID] = core.QueueInfo{Position: 10 + i, Reason: "explained by the dispatcher"}
	}
	c.calls = append(c.calls, ids)
	return out
}

func TestQueue_ExplainerWins(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	id := e.submit(tok, map[string]any{"command": []string{"x"}})
	ctl := &explainControl{testControl: e.ctl}
	s, err := New(Config{JWTSecret: testSecret, LogDir: e.logDir, BcryptCost: 4}, e.st, ctl)
	if err != nil {
		t.Fatal(err)
	}
	tasks := []core.Task{{ID: id, Status: core.StatusQueued}, {ID: "other", Status: core.StatusRunning}}
	s.explainQueue(context.Background(), tasks)
	if tasks[0].QueuePosition != 10 || tasks[0].PendingReason != "explained by the dispatcher" || tasks[1].QueuePosition != 0 {
		t.Fatalf("got %+v", tasks)
	}
	if len(ctl.calls) != 1 || len(ctl.calls[0]) != 1 || ctl.calls[0][0] != id {
		t.Fatalf("Explain got %v; want only the queued run", ctl.calls)
	}
	b, _ := json.Marshal(core.Task{ID: "x"})
	if strings.Contains(string(b), "queuePosition") || strings.Contains(string(b), "pendingReason") {
		t.Fatalf("unexplained Task JSON carries the fields: %s", b)
	}
}
