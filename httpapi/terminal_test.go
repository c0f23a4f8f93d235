package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/terminal"
)

// Submissions of interactive runs (issue 34): kind and record on the Task,
// a command optional, the record flag through the env only the master sets.
func TestInteractiveSubmit_Success(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	sh := e.task(e.submit(tok, `{"kind":"interactive"}`))
	if sh.Kind != core.KindInteractive || len(sh.Command) != 0 || sh.Name != "shell" || sh.Env[core.RecordEnv] != "" {
		t.Fatalf("a session without a command: kind %q, command %v, name %q, env %v", sh.Kind, sh.Command, sh.Name, sh.Env)
	}
	nr := e.task(e.submit(tok, `{"kind":"interactive","record":false,"command":["htop"],"env":{"A":"1"}}`))
	if nr.Env[core.RecordEnv] != "0" || nr.Env["A"] != "1" {
		t.Fatalf("record false: env %v", nr.Env)
	}
	if b := e.task(e.submit(tok, `{"command":["x"]}`)); b.Kind != core.KindBatch {
		t.Fatalf("a plain submission has kind %q", b.Kind)
	}
	// A rerun is a session again, unrecorded again.
	r := e.req("POST", "/api/tasks/"+nr.ID+"/rerun", tok, `{}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("rerun: %d %s", r.status, r.body)
	}
	if rr := e.task(r.json(t)["id"].(string)); rr.Kind != core.KindInteractive || rr.Env[core.RecordEnv] != "0" {
		t.Fatalf("rerun of a session: kind %q env %v", rr.Kind, rr.Env)
	}
}

func TestInteractiveSubmit_Failure(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	f := func(body, field string) {
		t.Helper()
		r := e.req("POST", "/api/train", tok, body)
		if r.status != http.StatusBadRequest || r.errCode(t) != "bad_request" || !strings.Contains(string(r.body), field) {
			t.Fatalf("%s: want 400 naming %s, got %d %s", body, field, r.status, r.body)
		}
	}
	f(`{"kind":"notebook"}`, "kind")
	f(`{"kind":"batch"}`, "command")
	f(`{"command":["x"],"record":false}`, "record")
	f(`{"kind":"interactive","env":{"RLSCHED_RECORD":"0"}}`, "RLSCHED_RECORD")
}

// The terminal's refusals before any upgrade: another user (an admin too)
// 403, a batch run or one that has not started or has ended 409, an
// unknown one 404, no token 401.
func TestTerminal_Refusals(t *testing.T) {
	e := newEnv(t)
	alice, _ := e.user("alice")
	bob, _ := e.user("bob")
	sess := e.submit(bob, `{"kind":"interactive"}`)
	batch := e.submit(bob, `{"command":["x"]}`)
	ended := e.submit(bob, `{"kind":"interactive"}`)
	e.finish(ended, core.StatusSucceeded)
	ws := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	f := func(path, tok string, status int, words ...string) {
		t.Helper()
		r := e.req("GET", path, tok, nil, ws...)
		if r.status != status {
			t.Fatalf("GET %s: %d %s, want %d", path, r.status, r.body, status)
		}
		for _, w := range words {
			if !strings.Contains(string(r.body), w) {
				t.Fatalf("GET %s: %s lacks %q", path, r.body, w)
			}
		}
	}
	for _, p := range []string{"/ws/sessions/", "/api/tasks/"} {
		suffix := ""
		if p == "/api/tasks/" {
			suffix = "/terminal"
		}
		f(p+sess+suffix, alice, http.StatusForbidden, "owner")
		f(p+sess+suffix, bob, http.StatusConflict, "QUEUED")
		f(p+batch+suffix, bob, http.StatusConflict, "batch")
		f(p+ended+suffix, bob, http.StatusConflict, "SUCCEEDED")
		f(p+"r-unknown"+suffix, bob, http.StatusNotFound)
		f(p+sess+suffix, "", http.StatusUnauthorized)
		f(p+"..%2Fx"+suffix, bob, http.StatusBadRequest)
	}
}

// MAX_INTERACTIVE_GPUS: a user's sessions not yet ended hold at most that
// many GPUs together; batch runs and other users' sessions do not count.
func TestInteractiveGPUCap(t *testing.T) {
	e := newEnvWith(t, func(c *Config) { c.MaxInteractiveGPUs = 2 })
	alice, _ := e.user("alice")
	bob, _ := e.user("bob")
	f := func(tok, body string, status int, words ...string) {
		t.Helper()
		r := e.req("POST", "/api/train", tok, body)
		if r.status != status {
			t.Fatalf("%s: %d %s, want %d", body, r.status, r.body, status)
		}
		for _, w := range words {
			if !strings.Contains(string(r.body), w) {
				t.Fatalf("%s: %s lacks %q", body, r.body, w)
			}
		}
	}
	f(alice, `{"kind":"interactive","gpus":3}`, http.StatusBadRequest, "gpus", "MAX_INTERACTIVE_GPUS")
	first := e.submit(alice, `{"kind":"interactive","gpus":1}`)
	e.submit(alice, `{"command":["x"],"gpus":4}`)
	e.submit(bob, `{"kind":"interactive","gpus":2}`)
	e.submit(alice, `{"kind":"interactive"}`) // no GPUs: not counted
	e.submit(alice, `{"kind":"interactive","gpus":1}`)
	f(alice, `{"kind":"interactive","gpus":1}`, http.StatusConflict, "2 GPUs", "MAX_INTERACTIVE_GPUS")
	e.finish(first, core.StatusSucceeded)
	f(alice, `{"kind":"interactive","gpus":1}`, http.StatusAccepted)
}

// fakeTerms is the dispatcher's side for the relay test: one session whose
// "worker" echoes input back as output and acks it.
type fakeTerms struct {
	hub *terminal.Hub
	id  string
	w   *echoWorker
}

func (f *fakeTerms) Terminal(id string) (*terminal.Session, error) {
	if id != f.id {
		return nil, errors.New("not here")
	}
	return f.hub.Session(id, 1, 7, f.w), nil
}

type echoWorker struct {
	mu      sync.Mutex
	s       *terminal.Session
	out     uint64
	resizes [][2]uint32
	away    bool // the worker is not connected
}

func (w *echoWorker) Input(off uint64, data []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.away {
		return errors.New("worker not connected")
	}
	s, o := w.s, w.out
	w.out += uint64(len(data))
	// In order and before returning: data is the relay's buffer again after
	// (terminal.Sender).
	s.Output(o, data)
	s.Ack(off + uint64(len(data)))
	return nil
}

func (w *echoWorker) Resize(c, r uint32) error {
	w.mu.Lock()
	w.resizes = append(w.resizes, [2]uint32{c, r})
	w.mu.Unlock()
	return nil
}

// TestTerminal_Relay runs the WebSocket relay in process (go test -race):
// the ring first, input echoed back, a refused and an accepted resize, a
// large message forwarded in chunks, and the end message with the status.
func TestTerminal_Relay(t *testing.T) {
	ft := &fakeTerms{hub: terminal.NewHub(), w: &echoWorker{}}
	e := newEnvWith(t, func(c *Config) { c.Terminals = ft })
	tok, _ := e.user("alice")
	ft.id = e.submit(tok, `{"kind":"interactive"}`)
	e.finish(ft.id, core.StatusRunning)
	sess, _ := ft.Terminal(ft.id)
	ft.w.s = sess
	sess.Output(0, []byte("$ prompt"))
	ft.w.out = 8

	conn, _, err := websocket.DefaultDialer.Dial("ws://"+e.addr+"/ws/sessions/"+ft.id, http.Header{"Authorization": {"Bearer " + tok}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var screen strings.Builder
	var texts []string
	read := func(what string, done func() bool) {
		t.Helper()
		for !done() {
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			typ, b, err := conn.ReadMessage()
			if err != nil {
				t.Fatalf("waiting for %s: %v (%d bytes of screen, texts %q)", what, err, screen.Len(), texts)
			}
			if typ == websocket.BinaryMessage {
				screen.Write(b)
			} else {
				texts = append(texts, string(b))
			}
		}
	}
	read("the ring", func() bool { return screen.String() == "$ prompt" })
	_ = conn.WriteMessage(websocket.TextMessage, []byte(`{"resize":[100000,24]}`))
	read("the refusal", func() bool { return len(texts) == 1 })
	if !strings.Contains(texts[0], `"error"`) {
		t.Fatalf("resize refusal: %s", texts[0])
	}
	_ = conn.WriteMessage(websocket.TextMessage, []byte(`{"resize":[120,40]}`))
	big := strings.Repeat("y", 200<<10) // 200 KiB in one message: over the window, forwarded in chunks
	_ = conn.WriteMessage(websocket.BinaryMessage, []byte(big))
	read("the echo", func() bool { return screen.Len() == 8+len(big) })
	ft.w.mu.Lock()
	rs := ft.w.resizes
	ft.w.mu.Unlock()
	if len(rs) != 1 || rs[0] != [2]uint32{120, 40} {
		t.Fatalf("resizes forwarded: %v", rs)
	}
	// The worker away: the input is dropped and the viewer told; the
	// connection stays, and input flows again once the worker is back.
	ft.w.mu.Lock()
	ft.w.away = true
	ft.w.mu.Unlock()
	_ = conn.WriteMessage(websocket.BinaryMessage, []byte("lost"))
	read("the drop notice", func() bool { return len(texts) == 2 })
	if !strings.Contains(texts[1], "input dropped") {
		t.Fatalf("drop notice: %s", texts[1])
	}
	ft.w.mu.Lock()
	ft.w.away = false
	ft.w.mu.Unlock()
	_ = conn.WriteMessage(websocket.BinaryMessage, []byte("back"))
	read("the echo after the worker came back", func() bool { return strings.HasSuffix(screen.String(), "back") })

	e.finish(ft.id, core.StatusSucceeded)
	ft.hub.End(ft.id, "the run ended")
	read("the end", func() bool { return len(texts) == 3 })
	if !strings.Contains(texts[2], `"ended"`) || !strings.Contains(texts[2], "SUCCEEDED") {
		t.Fatalf("end message: %s", texts[2])
	}
}
