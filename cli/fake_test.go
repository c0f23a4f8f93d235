package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
)

// fakeServer implements just enough of API.md for the client tests. The real
// master is tested end to end elsewhere.
type fakeServer struct {
	t   *testing.T
	srv *httptest.Server

	mu        sync.Mutex
	users     map[string]string // name -> password
	tasks     map[string]*core.Task
	order     []string // creation order
	nextID    int
	authSeen  []string // Authorization header of every request
	trainBody []byte   // last POST /api/train body
	rerunBody []byte   // last POST /api/tasks/{id}/rerun body
	listReqs  []string // raw query of every GET /api/tasks
	// statuses[id] are returned by successive GET /api/tasks/{id}; the last sticks.
	statuses map[string][]core.Status
	// Logs: log[id] is the file; onLogRead (if set) runs before each log read,
	// under mu, with the number of log reads so far; logMax clamps a read.
	logs      map[string][]byte
	onLogRead func(id string, n int)
	logReads  int
	logMax    int
	logJSON   bool // answer logs in JSON mode even for Accept: text/plain
	logOffs   []int64
	series    map[string]map[string][][2]float64
}

func newFakeServer(t *testing.T) *fakeServer {
	f := &fakeServer{
		t:        t,
		users:    map[string]string{},
		tasks:    map[string]*core.Task{},
		statuses: map[string][]core.Status{},
		logs:     map[string][]byte{},
		series:   map[string]map[string][][2]float64{},
		logMax:   1 << 20,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/auth/register", f.register)
	mux.HandleFunc("POST /api/auth/login", f.login)
	mux.HandleFunc("POST /api/auth/logout", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	mux.HandleFunc("GET /api/auth/me", f.authed(f.me))
	mux.HandleFunc("POST /api/train", f.authed(f.train))
	mux.HandleFunc("GET /api/tasks", f.authed(f.list))
	mux.HandleFunc("GET /api/tasks/{id}", f.authed(f.get))
	mux.HandleFunc("POST /api/tasks/{id}/cancel", f.authed(f.cancel))
	mux.HandleFunc("POST /api/tasks/{id}/rerun", f.authed(f.rerun))
	mux.HandleFunc("GET /api/tasks/{id}/metrics", f.authed(f.metrics))
	mux.HandleFunc("GET /api/monitor/logs/{id}", f.authed(f.logsHandler))
	mux.HandleFunc("GET /api/workers", f.authed(f.workers))
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tid := r.Header.Get("X-Trace-Id")
		if !core.ValidTraceID(tid) {
			tid = core.NewTraceID()
		}
		w.Header().Set("X-Trace-Id", tid)
		f.mu.Lock()
		f.authSeen = append(f.authSeen, r.Header.Get("Authorization"))
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) url() string { return f.srv.URL }

func tokenFor(user string) string { return "tok-" + user }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeErr answers API.md's error shape. Its trace id is "T" + the request's,
// so tests can tell it came from the body.
func writeErr(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{
		"code": code, "message": msg, "traceId": "T" + r.Header.Get("X-Trace-Id")}})
}

func (f *fakeServer) authed(h func(w http.ResponseWriter, r *http.Request, user string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		user, isTok := strings.CutPrefix(tok, "tok-")
		f.mu.Lock()
		_, known := f.users[user]
		f.mu.Unlock()
		if !ok || !isTok || !known {
			writeErr(w, r, 401, "unauthorized", "missing or invalid token")
			return
		}
		h(w, r, user)
	}
}

func (f *fakeServer) register(w http.ResponseWriter, r *http.Request) {
	var b struct{ Username, Password string }
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		writeErr(w, r, 400, "bad_request", "bad JSON")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, taken := f.users[b.Username]; taken {
		writeErr(w, r, 409, "conflict", "user name already taken")
		return
	}
	f.users[b.Username] = b.Password
	writeJSON(w, 201, map[string]any{"id": len(f.users), "username": b.Username, "role": "USER"})
}

func (f *fakeServer) addUser(name, pw string) {
	f.mu.Lock()
	f.users[name] = pw
	f.mu.Unlock()
}

func (f *fakeServer) login(w http.ResponseWriter, r *http.Request) {
	var b struct{ Username, Password string }
	_ = json.NewDecoder(r.Body).Decode(&b)
	f.mu.Lock()
	pw, ok := f.users[b.Username]
	f.mu.Unlock()
	if !ok || pw != b.Password {
		writeErr(w, r, 401, "unauthorized", "bad user name or password")
		return
	}
	writeJSON(w, 200, map[string]any{"token": tokenFor(b.Username),
		"expiresAt": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		"user":      map[string]any{"id": 1, "username": b.Username, "role": "USER"}})
}

func (f *fakeServer) me(w http.ResponseWriter, r *http.Request, user string) {
	writeJSON(w, 200, map[string]any{"id": 1, "username": user, "role": "USER"})
}

// addTask stores t (id assigned when empty) and returns its id.
func (f *fakeServer) addTask(t core.Task) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addTaskLocked(t)
}

func (f *fakeServer) addTaskLocked(t core.Task) string {
	if t.ID == "" {
		f.nextID++
		t.ID = fmt.Sprintf("r%04d", f.nextID)
	}
	if t.Status == "" {
		t.Status = core.StatusQueued
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now().Add(-3 * time.Minute)
	}
	f.tasks[t.ID] = &t
	f.order = append(f.order, t.ID)
	return t.ID
}

func (f *fakeServer) train(w http.ResponseWriter, r *http.Request, user string) {
	body, _ := io.ReadAll(r.Body)
	var b struct {
		Command   []string        `json:"command"`
		Algorithm string          `json:"algorithm"`
		Params    json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		writeErr(w, r, 400, "bad_request", "bad JSON: "+err.Error())
		return
	}
	if len(b.Command) == 0 && b.Algorithm == "" {
		writeErr(w, r, 400, "bad_request", "command or algorithm is required")
		return
	}
	f.mu.Lock()
	f.trainBody = body
	id := f.addTaskLocked(core.Task{User: user, Command: b.Command, Params: b.Params})
	f.mu.Unlock()
	writeJSON(w, 202, map[string]any{"id": id, "status": "QUEUED", "traceId": r.Header.Get("X-Trace-Id")})
}

func (f *fakeServer) list(w http.ResponseWriter, r *http.Request, user string) {
	q := r.URL.Query()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listReqs = append(f.listReqs, r.URL.RawQuery)
	limit := 50
	if l := q.Get("limit"); l != "" {
		limit, _ = strconv.Atoi(l)
	}
	// newest first; the cursor is the index to start at.
	var ids []string
	for i := len(f.order) - 1; i >= 0; i-- {
		t := f.tasks[f.order[i]]
		if s := q.Get("status"); s != "" && string(t.Status) != s {
			continue
		}
		ids = append(ids, t.ID)
	}
	start := 0
	if c := q.Get("cursor"); c != "" {
		start, _ = strconv.Atoi(strings.TrimPrefix(c, "c"))
	}
	items := []*core.Task{}
	for i := start; i < len(ids) && len(items) < limit; i++ {
		items = append(items, f.tasks[ids[i]])
	}
	next := ""
	if start+len(items) < len(ids) {
		next = fmt.Sprintf("c%d", start+len(items))
	}
	writeJSON(w, 200, map[string]any{"items": items, "nextCursor": next})
}

func (f *fakeServer) get(w http.ResponseWriter, r *http.Request, user string) {
	id := r.PathValue("id")
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tasks[id]
	if !ok {
		writeErr(w, r, 404, "not_found", "run "+id+" not found")
		return
	}
	if seq := f.statuses[id]; len(seq) > 0 {
		t.Status = seq[0]
		if len(seq) > 1 {
			f.statuses[id] = seq[1:]
		}
	}
	writeJSON(w, 200, t)
}

func (f *fakeServer) cancel(w http.ResponseWriter, r *http.Request, user string) {
	id := r.PathValue("id")
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tasks[id]
	switch {
	case !ok:
		writeErr(w, r, 404, "not_found", "run "+id+" not found")
	case t.Status.Terminal():
		writeErr(w, r, 409, "conflict", "run "+id+" already finished")
	default:
		t.Status = core.StatusCancelled
		writeJSON(w, 202, t)
	}
}

func (f *fakeServer) rerun(w http.ResponseWriter, r *http.Request, user string) {
	id := r.PathValue("id")
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rerunBody = body
	t, ok := f.tasks[id]
	if !ok {
		writeErr(w, r, 404, "not_found", "run "+id+" not found")
		return
	}
	var over struct {
		Params json.RawMessage `json:"params"`
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &over); err != nil {
			writeErr(w, r, 400, "bad_request", "bad JSON")
			return
		}
	}
	n := *t
	n.ID, n.Status = "", core.StatusQueued
	if over.Params != nil {
		n.Params = over.Params
	}
	nid := f.addTaskLocked(n)
	writeJSON(w, 202, map[string]any{"id": nid, "status": "QUEUED"})
}

func (f *fakeServer) metrics(w http.ResponseWriter, r *http.Request, user string) {
	id := r.PathValue("id")
	f.mu.Lock()
	defer f.mu.Unlock()
	all := f.series[id]
	out := map[string][][2]float64{}
	names := r.URL.Query().Get("names")
	for n, s := range all {
		if names == "" || strings.Contains(","+names+",", ","+n+",") {
			out[n] = s
		}
	}
	writeJSON(w, 200, map[string]any{"taskId": id, "series": out})
}

func (f *fakeServer) logsHandler(w http.ResponseWriter, r *http.Request, user string) {
	id := r.PathValue("id")
	off, err := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	if err != nil || off < 0 {
		writeErr(w, r, 400, "bad_request", "bad offset")
		return
	}
	f.mu.Lock()
	if _, ok := f.tasks[id]; !ok {
		f.mu.Unlock()
		writeErr(w, r, 404, "not_found", "run "+id+" not found")
		return
	}
	f.logReads++
	f.logOffs = append(f.logOffs, off)
	if f.onLogRead != nil {
		f.onLogRead(id, f.logReads)
	}
	log := f.logs[id]
	end := int64(len(log))
	if off > end {
		off = end
	}
	if end-off > int64(f.logMax) {
		end = off + int64(f.logMax)
	}
	chunk := string(log[off:end])
	eof := end == int64(len(log))
	jsonMode := f.logJSON
	f.mu.Unlock()
	if !jsonMode && strings.Contains(r.Header.Get("Accept"), "text/plain") {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Next-Offset", strconv.FormatInt(end, 10))
		_, _ = io.WriteString(w, chunk)
		return
	}
	lines := []string{}
	if chunk != "" {
		lines = strings.Split(strings.TrimSuffix(chunk, "\n"), "\n")
	}
	writeJSON(w, 200, map[string]any{"status": "SUCCESS", "content": lines, "offset": off, "nextOffset": end, "eof": eof})
}

func (f *fakeServer) workers(w http.ResponseWriter, r *http.Request, user string) {
	ws := []core.WorkerInfo{
		{ID: "w1", Host: "gpu-a", State: core.WorkerRunning, Slots: 4, RunningTasks: []string{"r0001"},
			GPUs:            []core.GPU{{Index: 0, Name: "H100", TaskID: "r0001"}, {Index: 1, Name: "H100"}},
			LastHeartbeatAt: time.Now().Add(-2 * time.Second)},
		{ID: "w2", Host: "gpu-b", State: core.WorkerDown, Slots: 2},
	}
	writeJSON(w, 200, map[string]any{"items": ws})
}

// sortedKeys is for stable assertions on maps.
func sortedKeys[M ~map[string]V, V any](m M) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
