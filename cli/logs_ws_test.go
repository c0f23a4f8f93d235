package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/httpapi"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/live"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/sqlite"
)

// nopControl stands in for the dispatcher of a real REST server.
type nopControl struct{}

func (nopControl) Notify()          {}
func (nopControl) Queued(core.Task) {}
func (nopControl) Cancel(context.Context, string) (core.Task, error) {
	return core.Task{}, core.ErrConflict
}
func (nopControl) Workers() []core.WorkerInfo { return nil }
func (nopControl) MasterID() string           { return "m1" }

// realServer is a master's REST API and WebSocket (hub nil: no /ws) on a
// real socket, over SQLite.
type realServer struct {
	url    string
	st     store.Store
	hub    *live.Hub
	logDir string
	access *testutil.SyncBuffer
}

func newRealServer(t *testing.T, withHub bool) *realServer {
	t.Helper()
	return newRealServerWith(t, withHub, nil)
}

// newRealServerWith is newRealServer with ctl as the dispatcher (nil: one
// that does nothing).
func newRealServerWith(t *testing.T, withHub bool, ctl func(store.Store) httpapi.Control) *realServer {
	t.Helper()
	dir := t.TempDir()
	raw, err := sqlite.Open(filepath.Join(dir, "rlsched.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	rs := &realServer{st: raw, logDir: filepath.Join(dir, "logs"), access: &testutil.SyncBuffer{}}
	if err := os.MkdirAll(rs.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var control httpapi.Control = nopControl{}
	if ctl != nil {
		control = ctl(raw)
	}
	if withHub {
		rs.hub = live.NewHub(live.HubConfig{LogDir: rs.logDir, HistoryChunk: 1000})
		rs.st = store.Publishing(raw, rs.hub)
	}
	srv, err := httpapi.New(httpapi.Config{
		JWTSecret:  []byte("cli-test-secret-0123456789"),
		LogDir:     rs.logDir,
		BcryptCost: bcrypt.MinCost,
		Logger:     zerolog.New(rs.access),
		Hub:        rs.hub,
	}, rs.st, control)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Shutdown()
		<-done
	})
	rs.url = "http://" + ln.Addr().String()
	return rs
}

// A run printing while `logs -f` follows it: every byte once, in order,
// through the WebSocket when the server has one, by polling when not; it
// stops once the run has ended and the log is drained.
func TestLogs_FollowRealServer(t *testing.T) {
	for _, withHub := range []bool{true, false} {
		t.Run(fmt.Sprintf("hub=%v", withHub), func(t *testing.T) {
			rs := newRealServer(t, withHub)
			h := newHarness(t)
			h.vars["RLSCHED_SERVER"] = rs.url
			h.stdin = "password1\n"
			h.mustRun(0, "register", "-u", "alice", "--password-stdin")
			h.stdin = "password1\n"
			h.mustRun(0, "login", "-u", "alice", "--password-stdin")
			out, _ := h.mustRun(0, "submit", "--", "python3", "train.py")
			id := strings.TrimSpace(out)
			task, err := rs.st.Task(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}

			f, err := os.OpenFile(filepath.Join(rs.logDir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var content []byte
			write := func(p []byte) {
				off := int64(len(content))
				if _, err := f.Write(p); err != nil {
					t.Error(err)
				}
				content = append(content, p...)
				if rs.hub != nil {
					rs.hub.LogAppended(id, off, p)
				}
			}
			write([]byte("TRACE_ID:" + task.TraceID + "\n"))
			for i := 0; i < 300; i++ {
				write(fmt.Appendf(nil, "episode %d reward=%d héllo 日本\n", i, i))
			}

			writerDone := make(chan struct{})
			go func() {
				defer close(writerDone)
				var buf []byte
				for i := 300; i < 3000; i++ {
					buf = fmt.Appendf(buf, "episode %d reward=%d héllo 日本\n", i, i)
					if i%7 == 0 {
						for len(buf) > 0 {
							n := min(len(buf), 97)
							write(buf[:n])
							buf = buf[n:]
						}
					}
				}
				write(append(buf, "FINAL_REWARD:1.5"...)) // no newline at the end
				// The run ends after its last bytes are in the file.
				cur, err := rs.st.Task(context.Background(), id)
				if err != nil {
					t.Error(err)
					return
				}
				next := cur
				now := time.Now()
				next.Status, next.FinishedAt = core.StatusSucceeded, &now
				if err := rs.st.UpdateTask(context.Background(), &next, store.Expect{Fence: cur.Fence, Status: cur.Status}); err != nil {
					t.Error(err)
				}
			}()

			got, _ := h.mustRun(0, "logs", "-f", id)
			<-writerDone
			if got != string(content) {
				t.Fatalf("logs -f wrote %d bytes, want %d; first difference at %d",
					len(got), len(content), firstDiff([]byte(got), content))
			}
			usedWS := strings.Contains(rs.access.String(), `"path":"/ws","status":101`)
			if usedWS != withHub {
				t.Fatalf("WebSocket used: %v, want %v", usedWS, withHub)
			}

			// --offset on an ended run, and from the middle.
			got, _ = h.mustRun(0, "logs", "-f", id, "--offset", "1000")
			if got != string(content[1000:]) {
				t.Fatalf("logs -f --offset 1000: %d bytes, want %d", len(got), len(content)-1000)
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// fakeWS scripts the server side of /ws, one function per connection.
type fakeWS struct {
	t     *testing.T
	mu    sync.Mutex
	conns []func(c *websocket.Conn, sub map[string]any)
	subs  []map[string]any // the subscribe message of each connection
}

func (fw *fakeWS) handler(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("token") != tokenFor("alice") {
		writeErr(w, r, 401, "unauthorized", "sign in first")
		return
	}
	up := websocket.Upgrader{}
	c, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	var sub map[string]any
	if err := c.ReadJSON(&sub); err != nil {
		return
	}
	fw.mu.Lock()
	fw.subs = append(fw.subs, sub)
	n := len(fw.subs)
	fw.mu.Unlock()
	if n > len(fw.conns) {
		fw.t.Errorf("connection %d was not expected", n)
		return
	}
	fw.conns[n-1](c, sub)
}

func sendFrame(t *testing.T, c *websocket.Conn, v string) {
	if err := c.WriteMessage(websocket.TextMessage, []byte(v)); err != nil {
		t.Errorf("fake ws: %v", err)
	}
}

func logFrame(topic string, off int64, data string) string {
	b, _ := json.Marshal(map[string]any{"topic": topic, "type": "log", "offset": off,
		"nextOffset": off + int64(len(data)), "data": data})
	return string(b)
}

// Frames repeat bytes, skip ahead (lagged: the gap comes over REST), and
// the connection drops: the output is still every byte once; the client
// comes back with its last offset; once the run has ended the tail comes
// over REST.
func TestLogs_FollowWebSocketResumes(t *testing.T) {
	h := newHarness(t)
	fw := &fakeWS{t: t}
	both := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" {
			fw.handler(w, r)
			return
		}
		h.f.srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(both.Close)
	h.vars["RLSCHED_SERVER"] = both.URL
	h.login()
	id := h.f.addTask(core.Task{Status: core.StatusRunning})
	topic := "/topic/logs/" + id
	content := "TRACE_ID:abc\nline one\nline two\nline three\nline four\nthe tail\n"
	h.f.mu.Lock()
	h.f.logs[id] = []byte(content)
	h.f.logMax = 10 // the fake ignores ?limit=; this keeps the gap fill to the gap
	h.f.mu.Unlock()

	fw.conns = []func(*websocket.Conn, map[string]any){
		func(c *websocket.Conn, sub map[string]any) {
			sendFrame(t, c, `{"type":"subscribed","topic":"`+topic+`","offset":0}`)
			sendFrame(t, c, logFrame(topic, 0, content[0:10]))
			sendFrame(t, c, logFrame(topic, 5, content[5:20]))                  // overlaps
			sendFrame(t, c, `{"topic":"/topic/tasks","type":"task","data":{}}`) // another topic
			sendFrame(t, c, `{"topic":"`+topic+`","type":"lagged","offset":30}`)
			sendFrame(t, c, logFrame(topic, 30, content[30:40]))
			// then the connection drops
		},
		func(c *websocket.Conn, sub map[string]any) {
			sendFrame(t, c, logFrame(topic, 40, content[40:45]))
			sendFrame(t, c, logFrame(topic, 45, content[45:50]))
			h.f.mu.Lock()
			h.f.tasks[id].Status = core.StatusSucceeded
			h.f.mu.Unlock()
			// Idle from here: the client reads the status and drains the
			// tail over REST. It closes the connection when done.
			_, _, _ = c.ReadMessage()
		},
	}
	out, errs := h.mustRun(0, "logs", "-f", id)
	if out != content {
		t.Fatalf("logs -f wrote\n%q\nwant\n%q\nstderr: %s", out, content, errs)
	}
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if len(fw.subs) != 2 || fw.subs[0]["offset"] != float64(0) || fw.subs[1]["offset"] != float64(40) ||
		fw.subs[1]["topic"] != topic || fw.subs[1]["op"] != "subscribe" {
		t.Fatalf("subscriptions: %v", fw.subs)
	}
}

// An error frame for the run ends the command with the server's message.
func TestLogs_FollowWebSocketError(t *testing.T) {
	h := newHarness(t)
	fw := &fakeWS{t: t}
	both := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" {
			fw.handler(w, r)
			return
		}
		h.f.srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(both.Close)
	h.vars["RLSCHED_SERVER"] = both.URL
	h.login()
	id := h.f.addTask(core.Task{Status: core.StatusRunning})
	fw.conns = []func(*websocket.Conn, map[string]any){
		func(c *websocket.Conn, sub map[string]any) {
			sendFrame(t, c, `{"type":"error","topic":"/topic/logs/`+id+`","error":{"code":"not_found","message":"run gone not found"}}`)
			_, _, _ = c.ReadMessage()
		},
	}
	_, errs := h.mustRun(1, "logs", "-f", id)
	if !strings.Contains(errs, "run gone not found") || !strings.Contains(errs, "rlsched ls") {
		t.Fatalf("stderr %q", errs)
	}
}
