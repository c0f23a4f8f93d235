package cli

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
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
	// Run outputs: files[id] are a run's artifacts (every version); cutFile
	// makes the next GET of that path send cutAt bytes and drop the
	// connection; corrupt serves other bytes than listed; fileReqs records
	// the Range and If-Range of every artifact GET; diffs[id] is code.diff.
	files     map[string][]fakeFile
	cutFile   string
	cutAt     int
	corrupt   bool
	fileReqs  []fileReq
	diffs     map[string]string
	trainEnc  string // Content-Encoding of the last POST /api/train
	trainSize int    // its size on the wire
}

type fakeFile struct {
	path     string
	attempt  int
	data     []byte
	modified time.Time
}

type fileReq struct{ path, rng, ifRange, attempt string }

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func newFakeServer(t *testing.T) *fakeServer {
	f := &fakeServer{
		t:        t,
		users:    map[string]string{},
		tasks:    map[string]*core.Task{},
		statuses: map[string][]core.Status{},
		logs:     map[string][]byte{},
		series:   map[string]map[string][][2]float64{},
		files:    map[string][]fakeFile{},
		diffs:    map[string]string{},
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
	mux.HandleFunc("DELETE /api/workers/{id}", f.authed(func(w http.ResponseWriter, r *http.Request, _ string) {
		writeErr(w, r, 404, "not_found", "worker "+r.PathValue("id")+" not found")
	}))
	mux.HandleFunc("GET /api/tasks/{id}/artifacts", f.authed(f.artifacts))
	mux.HandleFunc("GET /api/tasks/{id}/artifacts/{path...}", f.authed(f.artifactFile))
	mux.HandleFunc("GET /api/tasks/{id}/code.diff", f.authed(f.codeDiff))
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
	writeJSON(w, 200, map[string]any{"id": 1, "username": user, "role": "USER", "artifactBytes": 3 << 30, "artifactLimitBytes": 1 << 40})
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

// readBody reads a request body as the master does: inflated when sent
// with Content-Encoding: gzip. It returns the bytes on the wire's count too.
func readBody(r *http.Request) (body []byte, wire int, err error) {
	raw, err := io.ReadAll(r.Body)
	if err != nil || r.Header.Get("Content-Encoding") != "gzip" {
		return raw, len(raw), err
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, len(raw), err
	}
	body, err = io.ReadAll(zr)
	return body, len(raw), err
}

func (f *fakeServer) train(w http.ResponseWriter, r *http.Request, user string) {
	body, wire, err := readBody(r)
	if err != nil || wire > 1<<20 {
		writeErr(w, r, 400, "bad_request", fmt.Sprintf("body of %d bytes: %v", wire, err))
		return
	}
	f.mu.Lock()
	f.trainEnc, f.trainSize = r.Header.Get("Content-Encoding"), wire
	f.mu.Unlock()
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
	case t.Status == core.StatusRunning:
		writeJSON(w, 202, t) // as the master answers: its worker stops it later
	default:
		t.Status = core.StatusCancelled
		writeJSON(w, 202, t)
	}
}

func (f *fakeServer) rerun(w http.ResponseWriter, r *http.Request, user string) {
	id := r.PathValue("id")
	body, _, _ := readBody(r)
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
	if r.URL.Query().Get("times") == "true" {
		// The fake's points were logged a second a step from 1.7e12 ms,
		// but for step 1, whose time is not known.
		timed := map[string][][3]any{}
		for n, s := range out {
			for _, p := range s {
				var t any
				if p[0] != 1 {
					t = 1.7e12 + p[0]*1000
				}
				timed[n] = append(timed[n], [3]any{p[0], p[1], t})
			}
		}
		writeJSON(w, 200, map[string]any{"taskId": id, "series": timed})
		return
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
	if rk := r.URL.Query().Get("rank"); rk != "" { // a group member's log (issue 29)
		log = f.logs[id+".rank"+rk]
	}
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

func ptr[T any](v T) *T { return &v }

func (f *fakeServer) workers(w http.ResponseWriter, r *http.Request, user string) {
	ws := []core.WorkerInfo{
		{ID: "w1", Host: "gpu-a", State: core.WorkerRunning, Slots: 4, RunningTasks: []string{"r0001"},
			GPUs: []core.GPU{{Index: 0, Name: "H100", MemoryMB: 81559, TaskID: "r0001", Utilization: ptr(3), MemoryUsedMB: ptr[int64](2048),
				IdleSince: ptr(time.Now().Add(-90 * time.Second))},
				{Index: 1, Name: "H100", MemoryMB: 81559, Utilization: ptr(97), MemoryUsedMB: ptr[int64](40000),
					Foreign: []core.ForeignProc{{PID: 4242, User: "bob", Command: "python notebook.py", MemoryMB: ptr[int64](1200)}},
					Shares:  []core.GPUShare{{TaskID: "r0003", Fraction: 0.25, MemoryMB: 20389}, {TaskID: "r0004", Fraction: 0.5}}}},
			LastHeartbeatAt: time.Now().Add(-2 * time.Second), CPUs: 16, CPUsUsed: 2.5, MemoryMB: 65536, MemoryMBUsed: 4096,
			Enforcement: core.EnforcementNone, EnforcementWarning: "not root"},
		{ID: "w2", Host: "gpu-b", State: core.WorkerDown, Slots: 2, Enforcement: core.EnforcementCgroupV1},
		{ID: "w3", Host: "gpu-c", State: core.WorkerPending, Slots: 1, RunningTasks: []string{"r0002"},
			LastHeartbeatAt: time.Now().Add(-40 * time.Second)},
	}
	writeJSON(w, 200, map[string]any{"items": ws})
}

// addFile stores a version of an artifact of run id.
func (f *fakeServer) addFile(id, path string, attempt int, data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[id] = append(f.files[id], fakeFile{path, attempt, data, time.Now().Add(-2 * time.Minute)})
}

// versions are the files of id as API.md lists them: the newest version of
// each path, or those of one attempt.
func (f *fakeServer) versionsLocked(id, attempt string) []fakeFile {
	newest := map[string]fakeFile{}
	var order []string
	for _, v := range f.files[id] {
		if attempt != "" && strconv.Itoa(v.attempt) != attempt {
			continue
		}
		if _, ok := newest[v.path]; !ok {
			order = append(order, v.path)
		}
		if cur, ok := newest[v.path]; !ok || v.attempt >= cur.attempt {
			newest[v.path] = v
		}
	}
	out := make([]fakeFile, 0, len(order))
	for _, p := range order {
		out = append(out, newest[p])
	}
	return out
}

func (f *fakeServer) artifacts(w http.ResponseWriter, r *http.Request, user string) {
	id := r.PathValue("id")
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.tasks[id]; !ok {
		writeErr(w, r, 404, "not_found", "run "+id+" not found")
		return
	}
	items := []map[string]any{}
	for _, v := range f.versionsLocked(id, r.URL.Query().Get("attempt")) {
		items = append(items, map[string]any{"path": v.path, "size": len(v.data), "sha256": sha(v.data),
			"attempt": v.attempt, "modifiedAt": v.modified.UTC().Format(time.RFC3339Nano)})
	}
	writeJSON(w, 200, map[string]any{"items": items})
}

// artifactFile serves a file with ETag, Range and If-Range (net/http's
// ServeContent, as a real server would), or cuts the transfer short.
func (f *fakeServer) artifactFile(w http.ResponseWriter, r *http.Request, user string) {
	id, path := r.PathValue("id"), r.PathValue("path")
	attempt := r.URL.Query().Get("attempt")
	f.mu.Lock()
	f.fileReqs = append(f.fileReqs, fileReq{path, r.Header.Get("Range"), r.Header.Get("If-Range"), attempt})
	var file *fakeFile
	for _, v := range f.versionsLocked(id, attempt) {
		if v.path == path {
			file = &v
		}
	}
	cut := f.cutFile == path
	if cut {
		f.cutFile = ""
	}
	cutAt, corrupt := f.cutAt, f.corrupt
	f.mu.Unlock()
	if file == nil {
		writeErr(w, r, 404, "not_found", "artifact "+path+" not found")
		return
	}
	w.Header().Set("ETag", `"`+sha(file.data)+`"`)
	data := file.data
	if corrupt {
		data = bytes.ToUpper(data)
	}
	if cut {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(200)
		_, _ = w.Write(data[:cutAt])
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		panic(http.ErrAbortHandler) // the connection drops mid-body
	}
	http.ServeContent(w, r, "", file.modified, bytes.NewReader(data))
}

func (f *fakeServer) codeDiff(w http.ResponseWriter, r *http.Request, user string) {
	id := r.PathValue("id")
	f.mu.Lock()
	d, ok := f.diffs[id]
	f.mu.Unlock()
	switch {
	case !ok:
		writeErr(w, r, 404, "not_found", "run "+id+" has no stored diff")
	case user != "alice":
		writeErr(w, r, 403, "forbidden", "only the run's owner or an admin may read its diff (it may hold secrets, as env values do)")
	default:
		w.Header().Set("Content-Type", "text/x-diff; charset=utf-8")
		_, _ = io.WriteString(w, d)
	}
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
