package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/live"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/sqlite"
)

// wsFailAfter bounds every wait; reaching it fails the test, it never
// synchronises anything.
const wsFailAfter = 30 * time.Second

type wsEnv struct {
	*testEnv
	hub *live.Hub
	srv *Server
}

// newWSEnv is newEnv with a hub: the store is wrapped by store.Publishing
// so /topic/tasks sees every write, as the master wires it.
func newWSEnv(t *testing.T, hc live.HubConfig, ping time.Duration) *wsEnv {
	t.Helper()
	dir := t.TempDir()
	raw, err := sqlite.Open(filepath.Join(dir, "rlsched.db"))
	if err != nil {
		t.Fatalf("cannot open store: %v", err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	logDir := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	hc.LogDir = logDir
	hub := live.NewHub(hc)
	st := store.Publishing(raw, hub)
	e := &testEnv{
		t:      t,
		st:     st,
		ctl:    &testControl{st: st},
		clock:  &testClock{now: time.Now()},
		logDir: logDir,
		logs:   &testutil.SyncBuffer{},
		client: &http.Client{Timeout: 30 * time.Second},
	}
	srv, err := New(Config{
		JWTSecret:      testSecret,
		LogDir:         logDir,
		DefaultTrainer: testTrainer,
		LeasesKind:     "memory",
		BcryptCost:     bcrypt.MinCost,
		Logger:         zerolog.New(e.logs),
		Now:            e.clock.Now,
		Hub:            hub,
		WSPingInterval: ping,
	}, st, e.ctl)
	if err != nil {
		t.Fatalf("cannot create server: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("cannot listen: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		e.client.CloseIdleConnections()
		if err := srv.Shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	e.addr = ln.Addr().String()
	e.url = "http://" + e.addr
	return &wsEnv{testEnv: e, hub: hub, srv: srv}
}

type wsClient struct {
	t    *testing.T
	conn *websocket.Conn
}

type wsFrame struct {
	Topic      string          `json:"topic"`
	Type       string          `json:"type"`
	Offset     *int64          `json:"offset"`
	NextOffset *int64          `json:"nextOffset"`
	Data       json.RawMessage `json:"data"`
	Error      *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	raw []byte
}

// dialWS opens /ws with query q (e.g. "?token=...") and header pairs; it
// returns the connection, or the refusal's status and body.
func (e *wsEnv) dialWS(q string, rcvBuf int, hdr ...string) (*websocket.Conn, int, []byte, error) {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	if rcvBuf > 0 {
		d.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				_ = c.(*net.TCPConn).SetReadBuffer(rcvBuf)
			}
			return c, err
		}
	}
	h := http.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	conn, resp, err := d.Dial("ws://"+e.addr+"/ws"+q, h)
	if err != nil {
		if resp == nil {
			return nil, 0, nil, err
		}
		body, _ := io.ReadAll(resp.Body)
		return nil, resp.StatusCode, body, err
	}
	return conn, resp.StatusCode, nil, nil
}

func (e *wsEnv) connect(token string) *wsClient {
	e.t.Helper()
	conn, status, body, err := e.dialWS("?token="+token, 0)
	if err != nil {
		e.t.Fatalf("dial /ws: %v (%d %s)", err, status, body)
	}
	c := &wsClient{t: e.t, conn: conn}
	e.t.Cleanup(func() { conn.Close() })
	return c
}

func (c *wsClient) send(v any) {
	c.t.Helper()
	var b []byte
	switch v := v.(type) {
	case string:
		b = []byte(v)
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := c.conn.WriteMessage(websocket.TextMessage, b); err != nil {
		c.t.Fatalf("send %s: %v", b, err)
	}
}

func (c *wsClient) subscribe(topic string, offset int64) {
	c.t.Helper()
	c.send(map[string]any{"op": "subscribe", "topic": topic, "offset": offset})
}

// read returns the next frame; any error fails the test.
func (c *wsClient) read() wsFrame {
	c.t.Helper()
	f, err := c.tryRead()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return f
}

func (c *wsClient) tryRead() (wsFrame, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(wsFailAfter))
	typ, b, err := c.conn.ReadMessage()
	if err != nil {
		return wsFrame{}, err
	}
	if typ != websocket.TextMessage {
		return wsFrame{}, fmt.Errorf("frame of type %d", typ)
	}
	var f wsFrame
	if err := json.Unmarshal(b, &f); err != nil {
		return wsFrame{}, fmt.Errorf("frame is not JSON: %v: %q", err, b)
	}
	f.raw = b
	return f, nil
}

func (c *wsClient) expect(typ, topic string) wsFrame {
	c.t.Helper()
	f := c.read()
	if f.Type != typ || f.Topic != topic {
		c.t.Fatalf("want a %s frame of %q, got %s", typ, topic, f.raw)
	}
	return f
}

func (c *wsClient) expectError(code string) wsFrame {
	c.t.Helper()
	f := c.read()
	if f.Type != "error" || f.Error == nil || f.Error.Code != code || f.Error.Message == "" {
		c.t.Fatalf("want an error frame %s, got %s", code, f.raw)
	}
	return f
}

// runLog writes a run's log file and announces each append to the hub
// after writing it, as the batch writers do.
type runLog struct {
	hub *live.Hub
	id  string
	f   *os.File

	mu      sync.Mutex
	content []byte
}

func (e *wsEnv) newRunLog(id string) *runLog {
	e.t.Helper()
	f, err := os.OpenFile(filepath.Join(e.logDir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { f.Close() })
	return &runLog{hub: e.hub, id: id, f: f}
}

func (l *runLog) write(t *testing.T, p []byte) {
	l.mu.Lock()
	off := int64(len(l.content))
	if _, err := l.f.Write(p); err != nil {
		l.mu.Unlock()
		t.Errorf("write log: %v", err)
		return
	}
	l.content = append(l.content, p...)
	l.mu.Unlock()
	l.hub.LogAppended(l.id, off, p)
}

func (l *runLog) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.content...)
}

// logFollower reassembles a log topic from frames, offset-checked.
type logFollower struct {
	t      *testing.T
	topic  string
	next   int64
	got    []byte
	lagged []int64
	// fill, when set, fetches a lagged gap [from, to) the way a client
	// would: over REST.
	fill func(from, to int64) []byte
}

func (f *logFollower) take(fr wsFrame) {
	f.t.Helper()
	switch {
	case fr.Topic != f.topic:
		f.t.Fatalf("frame of another topic: %s", fr.raw)
	case fr.Type == "subscribed":
	case fr.Type == "lagged" && f.fill != nil && fr.Offset != nil && *fr.Offset >= f.next:
		f.lagged = append(f.lagged, *fr.Offset)
		f.got = append(f.got, f.fill(f.next, *fr.Offset)...)
		f.next = *fr.Offset
	case fr.Type == "log":
		var s string
		if fr.Offset == nil || fr.NextOffset == nil || *fr.Offset != f.next || json.Unmarshal(fr.Data, &s) != nil ||
			int64(len(s)) != *fr.NextOffset-*fr.Offset {
			f.t.Fatalf("log frame out of line at offset %d: %.300s", f.next, fr.raw)
		}
		f.got = append(f.got, s...)
		f.next = *fr.NextOffset
	default:
		f.t.Fatalf("unexpected frame %.300s", fr.raw)
	}
}

func (f *logFollower) readUntil(c *wsClient, end int64) {
	f.t.Helper()
	for f.next < end {
		f.take(c.read())
	}
}

func logLine(i int) []byte {
	return fmt.Appendf(nil, "episode %06d reward=%d héllo 日本 🎉\n", i, i%500)
}

func TestWS_AuthRequired(t *testing.T) {
	e := newWSEnv(t, live.HubConfig{}, 0)
	tok, _ := e.user("alice")
	f := func(q string, want int, hdr ...string) {
		t.Helper()
		conn, status, body, err := e.dialWS(q, 0, hdr...)
		if want == http.StatusSwitchingProtocols {
			if err != nil {
				t.Fatalf("dial %s %v: %v %d %s", q, hdr, err, status, body)
			}
			c := &wsClient{t: t, conn: conn}
			c.send(`{"op":"subscribe","topic":"/topic/tasks"}`)
			c.expect("subscribed", live.TopicTasks)
			conn.Close()
			return
		}
		if err == nil {
			conn.Close()
			t.Fatalf("dial %s %v: connected, want %d", q, hdr, want)
		}
		if status != want {
			t.Fatalf("dial %s %v: status %d, want %d: %s", q, hdr, status, want, body)
		}
		var b struct {
			Error struct{ Code, Message, TraceID string }
		}
		if json.Unmarshal(body, &b) != nil || b.Error.Code == "" || b.Error.TraceID == "" {
			t.Fatalf("dial %s: error body %s", q, body)
		}
	}
	f("", http.StatusUnauthorized)
	f("?token=", http.StatusUnauthorized)
	f("?token=garbage", http.StatusUnauthorized)
	f("?token="+tok+"x", http.StatusUnauthorized)
	f("", http.StatusUnauthorized, "Authorization", "Basic abc")
	f("?token="+tok, http.StatusSwitchingProtocols)
	f("", http.StatusSwitchingProtocols, "Authorization", "Bearer "+tok)
	f("", http.StatusSwitchingProtocols, "Cookie", CookieName+"="+tok)
	// A cookie only from this site's pages; a token from anywhere.
	f("", http.StatusSwitchingProtocols, "Cookie", CookieName+"="+tok, "Origin", "http://"+e.addr)
	f("", http.StatusForbidden, "Cookie", CookieName+"="+tok, "Origin", "http://evil.example")
	f("?token="+tok, http.StatusSwitchingProtocols, "Origin", "http://evil.example")

	// Not a WebSocket request: 426 after authentication.
	r := e.req("GET", "/ws", tok, nil)
	if r.status != http.StatusUpgradeRequired || r.errCode(t) != codeUpgradeRequired {
		t.Fatalf("plain GET /ws: %d %s", r.status, r.body)
	}
	if r := e.req("GET", "/ws", "", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("plain GET /ws without token: %d %s", r.status, r.body)
	}
	if r := e.req("POST", "/ws", tok, nil); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("POST /ws: %d %s", r.status, r.body)
	}
	// The token never reaches the access log.
	if strings.Contains(e.logs.String(), tok) {
		t.Fatal("the access log holds a token")
	}
}

func TestWS_UnavailableWithoutHub(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	r := e.req("GET", "/ws?token="+tok, "", nil, "Connection", "Upgrade", "Upgrade", "websocket",
		"Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	if r.status != http.StatusServiceUnavailable || r.errCode(t) != codeUnavailable {
		t.Fatalf("/ws without a hub: %d %s", r.status, r.body)
	}
}

// A run's log is written while clients subscribe from offset 0 and from
// the middle, and one reconnects with its last offset: each gets every
// byte once, in order.
func TestWS_LogsExactlyOnceWhileAppending(t *testing.T) {
	e := newWSEnv(t, live.HubConfig{HistoryChunk: 4096}, 0)
	tok, _ := e.user("alice")
	id := e.submit(tok, `{"command":["train"]}`)
	topic := live.LogTopic(id)
	log := e.newRunLog(id)
	log.write(t, []byte("TRACE_ID:"+e.task(id).TraceID+"\n"))
	for i := 0; i < 500; i++ {
		log.write(t, logLine(i))
	}

	const lines = 6000
	half := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		var buf []byte
		for i := 500; i < lines; i++ {
			buf = append(buf, logLine(i)...)
			if i == 2000 {
				close(half)
			}
			if i%3 == 0 || i == lines-1 {
				for len(buf) > 0 { // chunks that split characters
					n := min(len(buf), 61+i%50)
					log.write(t, buf[:n])
					buf = buf[n:]
				}
			}
		}
	}()

	a := e.connect(tok)
	a.subscribe(topic, 0)
	<-half
	mid := int64(len(log.bytes()) / 2)
	for !bytes.HasPrefix(log.bytes()[mid:], []byte("episode")) {
		mid++
	}
	b := e.connect(tok)
	b.subscribe(topic, mid)
	b.expect("subscribed", topic)

	// b reads a while, drops the connection, and comes back with its offset.
	fb := &logFollower{t: t, topic: topic, next: mid}
	fb.readUntil(b, mid+50_000)
	b.conn.Close()
	b = e.connect(tok)
	b.subscribe(topic, fb.next)

	<-writerDone
	end := int64(len(log.bytes()))
	fa := &logFollower{t: t, topic: topic}
	fa.readUntil(a, end)
	fb.readUntil(b, end)
	want := log.bytes()
	if !bytes.Equal(fa.got, want) {
		t.Fatalf("from 0: %d bytes, want %d", len(fa.got), len(want))
	}
	if !bytes.Equal(fb.got, want[mid:]) {
		t.Fatalf("from %d with a reconnect: %d bytes, want %d", mid, len(fb.got), len(want)-int(mid))
	}
}

// Garbage gets an error frame and the connection stays usable.
func TestWS_BadInputGetsErrorFrames(t *testing.T) {
	e := newWSEnv(t, live.HubConfig{MaxSubscriptions: 3}, 0)
	tok, _ := e.user("alice")
	id := e.submit(tok, `{"command":["train"]}`)
	c := e.connect(tok)
	f := func(msg string, code string) {
		t.Helper()
		c.send(msg)
		c.expectError(code)
	}
	f("garbage", codeBadRequest)
	f("", codeBadRequest)
	f("[1,2]", codeBadRequest)
	f("null", codeBadRequest)
	f(`{"op":"subscribe","topic":"/topic/tasks"`, codeBadRequest)
	f(`{}`, codeBadRequest)
	f(`{"op":"publish","topic":"/topic/tasks"}`, codeBadRequest)
	f(`{"op":7,"topic":"/topic/tasks"}`, codeBadRequest)
	f(`{"op":"subscribe"}`, codeBadRequest)
	f(`{"op":"subscribe","topic":"/topic/nope"}`, codeBadRequest)
	f(`{"op":"subscribe","topic":"/topic/logs/../../etc/passwd"}`, codeBadRequest)
	f(`{"op":"subscribe","topic":"/topic/logs/a%2Fb"}`, codeBadRequest)
	f(`{"op":"subscribe","topic":"/topic/logs/`+strings.Repeat("x", 3000)+`"}`, codeBadRequest)
	f(`{"op":"subscribe","topic":"/topic/logs/`+id+`","offset":-1}`, codeBadRequest)
	f(`{"op":"subscribe","topic":"/topic/logs/`+id+`","offset":1.5}`, codeBadRequest)
	f(`{"op":"subscribe","topic":"/topic/logs/`+id+`","offset":"0"}`, codeBadRequest)
	f(`{"op":"unsubscribe","topic":"/topic/x"}`, codeBadRequest)
	f(`{"op":"subscribe","topic":"/topic/logs/r-unknown"}`, codeNotFound)
	if err := c.conn.WriteMessage(websocket.BinaryMessage, []byte(`{"op":"subscribe","topic":"/topic/tasks"}`)); err != nil {
		t.Fatal(err)
	}
	c.expectError(codeBadRequest)

	// Still usable: subscriptions work, up to the limit.
	id2 := e.submit(tok, `{"command":["train"]}`)
	c.send(`{"op":"subscribe","topic":"/topic/tasks","extra":"ignored"}`)
	c.expect("subscribed", live.TopicTasks)
	c.send(`{"op":"subscribe","topic":"/topic/workers"}`)
	c.expect("subscribed", live.TopicWorkers)
	c.subscribe(live.LogTopic(id), 0)
	c.expect("subscribed", live.LogTopic(id))
	c.send(`{"op":"subscribe","topic":"/topic/logs/other"}`)
	if fr := c.expectError(codeNotFound); fr.Topic != "/topic/logs/other" {
		t.Fatalf("the error frame names its topic: %s", fr.raw)
	}
	c.subscribe(live.LogTopic(id2), 0)
	c.expectError(codeTooManySubscriptions)
	c.send(`{"op":"unsubscribe","topic":"/topic/workers"}`)
	c.expect("unsubscribed", live.TopicWorkers)
	c.subscribe(live.LogTopic(id2), 0)
	c.expect("subscribed", live.LogTopic(id2))

	// A message over the read limit ends the connection.
	c.send(`{"op":"subscribe","topic":"` + strings.Repeat("x", wsReadLimit) + `"}`)
	_, err := c.tryRead()
	if !websocket.IsCloseError(err, websocket.CloseMessageTooBig) {
		t.Fatalf("oversized message: want close 1009, got %v", err)
	}
}

// A client that stops reading is skipped ahead (lagged) while the writer
// of the log never waits; it fetches the gap over REST and has every byte.
// /topic/tasks lags the same way, without an offset.
func TestWS_SlowClientLaggedPublisherNeverBlocks(t *testing.T) {
	e := newWSEnv(t, live.HubConfig{QueueBytes: 64 << 10}, 0)
	tok, _ := e.user("alice")
	id := e.submit(tok, `{"command":["train"]}`)
	topic := live.LogTopic(id)
	log := e.newRunLog(id)

	conn, status, body, err := e.dialWS("?token="+tok, 128<<10)
	if err != nil {
		t.Fatalf("dial: %v %d %s", err, status, body)
	}
	t.Cleanup(func() { conn.Close() })
	c := &wsClient{t: t, conn: conn}
	c.subscribe(topic, 0)
	c.expect("subscribed", topic)
	c.send(`{"op":"subscribe","topic":"/topic/tasks"}`)
	c.expect("subscribed", live.TopicTasks)
	log.write(t, []byte("TRACE_ID:x\n"))
	fl := &logFollower{t: t, topic: topic}
	fl.readUntil(c, int64(len(log.bytes())))

	// The client reads nothing while 6 MiB go out: more than its queue and
	// both socket buffers hold.
	published := make(chan struct{})
	go func() {
		defer close(published)
		line := []byte(strings.Repeat("z", 1023) + "\n")
		for i := 0; i < 6<<10; i++ {
			log.write(t, line)
			if i%512 == 0 {
				e.hub.TaskChanged(core.Task{ID: id, Name: strings.Repeat("n", 4000), Status: core.StatusRunning})
			}
		}
	}()
	timer := time.NewTimer(wsFailAfter)
	defer timer.Stop()
	select {
	case <-published:
	case <-timer.C:
		t.Fatal("the publisher blocked on a client that does not read")
	}
	if st := e.hub.Stats(); st.Lagged == 0 {
		t.Fatalf("nobody lagged: %+v", st)
	}
	log.write(t, []byte("the end\n"))
	end := int64(len(log.bytes()))

	// Now it reads: log bytes in order, gaps announced by lagged frames
	// and fetched over REST, task events with one lagged frame between.
	fl.fill = func(from, to int64) []byte {
		var out []byte
		for from < to {
			r := e.req("GET", fmt.Sprintf("/api/monitor/logs/%s?offset=%d&limit=%d", id, from, to-from), tok, nil, "Accept", "text/plain")
			if r.status != http.StatusOK || len(r.body) == 0 {
				t.Fatalf("fetch gap: %d %s", r.status, r.body)
			}
			out = append(out, r.body...)
			from += int64(len(r.body))
		}
		return out
	}
	taskLagged := false
	for fl.next < end {
		fr := c.read()
		if fr.Topic == live.TopicTasks {
			if fr.Type == "lagged" {
				taskLagged = true
			}
			continue
		}
		fl.take(fr)
	}
	// A lagged frame owed to /topic/tasks goes out before its next event.
	e.hub.TaskChanged(core.Task{ID: id, Status: core.StatusSucceeded})
	for {
		fr := c.read()
		if fr.Topic == live.TopicTasks && fr.Type == "lagged" {
			taskLagged = true
		}
		if fr.Topic == live.TopicTasks && fr.Type == "task" && bytes.Contains(fr.Data, []byte(`"SUCCEEDED"`)) {
			break
		}
	}
	if len(fl.lagged) == 0 || !taskLagged {
		t.Fatalf("lagged frames: logs %v, tasks %v", fl.lagged, taskLagged)
	}
	if !bytes.Equal(fl.got, log.bytes()) {
		t.Fatalf("got %d bytes, want %d", len(fl.got), end)
	}
}

// /topic/tasks carries every write of a run through the publishing store
// decorator: submission, cancellation.
func TestWS_TasksTopic(t *testing.T) {
	e := newWSEnv(t, live.HubConfig{}, 0)
	tok, _ := e.user("alice")
	c := e.connect(tok)
	c.send(`{"op":"subscribe","topic":"/topic/tasks"}`)
	c.expect("subscribed", live.TopicTasks)
	id := e.submit(tok, `{"command":["train"],"name":"cartpole"}`)
	var task core.Task
	f := c.expect("task", live.TopicTasks)
	mustJSON(t, f.Data, &task)
	if task.ID != id || task.Status != core.StatusQueued || task.Name != "cartpole" || task.User != "alice" {
		t.Fatalf("submitted: %s", f.raw)
	}
	if r := e.req("POST", "/api/tasks/"+id+"/cancel", tok, nil); r.status != http.StatusAccepted {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	f = c.expect("task", live.TopicTasks)
	mustJSON(t, f.Data, &task)
	if task.ID != id || task.Status != core.StatusCancelled {
		t.Fatalf("cancelled: %s", f.raw)
	}
	// Workers come from the dispatcher's hook, straight to the hub.
	c.send(`{"op":"subscribe","topic":"/topic/workers"}`)
	c.expect("subscribed", live.TopicWorkers)
	e.hub.WorkerChanged(core.WorkerInfo{ID: "w1", Host: "gpu-a", State: core.WorkerIdle})
	f = c.expect("worker", live.TopicWorkers)
	var w core.WorkerInfo
	mustJSON(t, f.Data, &w)
	if w.ID != "w1" || w.State != core.WorkerIdle {
		t.Fatalf("worker: %s", f.raw)
	}
	c.send(`{"op":"unsubscribe","topic":"/topic/tasks"}`)
	c.expect("unsubscribed", live.TopicTasks)
	e.submit(tok, `{"command":["train"]}`)
	e.hub.WorkerChanged(core.WorkerInfo{ID: "w1", State: core.WorkerRunning})
	c.expect("worker", live.TopicWorkers) // and no task frame before it
}

// The server pings; a client that answers stays, one that does not is
// disconnected after 2.5 ping intervals.
func TestWS_Keepalive(t *testing.T) {
	e := newWSEnv(t, live.HubConfig{}, 300*time.Millisecond)
	tok, _ := e.user("alice")

	// The good client reads all along (pongs are sent from its reads).
	good := e.connect(tok)
	pings := make(chan struct{}, 100)
	good.conn.SetPingHandler(func(data string) error {
		pings <- struct{}{}
		return good.conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	frames := make(chan wsFrame, 10)
	readErr := make(chan error, 1)
	go func() {
		for {
			f, err := good.tryRead()
			if err != nil {
				readErr <- err
				return
			}
			frames <- f
		}
	}()
	mute := e.connect(tok)
	mute.conn.SetPingHandler(func(string) error { return nil })

	// The mute one is cut off; it only reads, so it sees the close.
	if _, err := mute.tryRead(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a client that never pongs: %v", err)
	}
	// The good one saw pings all along and still works.
	timer := time.NewTimer(wsFailAfter)
	defer timer.Stop()
	for n := 0; n < 4; n++ {
		select {
		case <-pings:
		case err := <-readErr:
			t.Fatalf("the good client was dropped: %v", err)
		case <-timer.C:
			t.Fatal("no pings")
		}
	}
	good.send(`{"op":"subscribe","topic":"/topic/tasks"}`)
	select {
	case f := <-frames:
		if f.Type != "subscribed" {
			t.Fatalf("good client: %s", f.raw)
		}
	case err := <-readErr:
		t.Fatalf("the good client was dropped: %v", err)
	case <-timer.C:
		t.Fatal("no answer")
	}
}

// Shutdown ends WebSocket sessions with "going away".
func TestWS_ShutdownClosesSessions(t *testing.T) {
	e := newWSEnv(t, live.HubConfig{}, 0)
	tok, _ := e.user("alice")
	c := e.connect(tok)
	c.send(`{"op":"subscribe","topic":"/topic/tasks"}`)
	c.expect("subscribed", live.TopicTasks)
	done := make(chan error, 1)
	go func() { done <- e.srv.Shutdown() }()
	_, err := c.tryRead()
	if !websocket.IsCloseError(err, websocket.CloseGoingAway) {
		t.Fatalf("want close 1001, got %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := e.hub.Stats(); st.Subscribers != 0 {
		t.Logf("subscribers right after shutdown: %d", st.Subscribers)
	}
}

// /topic/tasks shows a run's env values to its owner and admins only
// (issue 12); everyone else gets "***" for each, and nobody the fence.
func TestWS_TasksTopicMasksEnv(t *testing.T) {
	e := newWSEnv(t, live.HubConfig{}, 0)
	adminTok, _ := e.user("admin") // the first user is the admin
	aliceTok, _ := e.user("alice")
	bobTok, _ := e.user("bob")
	clients := map[string]*wsClient{}
	for name, tok := range map[string]string{"admin": adminTok, "alice": aliceTok, "bob": bobTok} {
		c := e.connect(tok)
		c.send(`{"op":"subscribe","topic":"/topic/tasks"}`)
		c.expect("subscribed", live.TopicTasks)
		clients[name] = c
	}
	id := e.submit(aliceTok, `{"command":["train"],"env":{"WANDB_API_KEY":"s3cret"}}`)
	for name, want := range map[string]string{"admin": "s3cret", "alice": "s3cret", "bob": core.MaskedValue} {
		f := clients[name].expect("task", live.TopicTasks)
		var task struct {
			ID  string            `json:"id"`
			Env map[string]string `json:"env"`
		}
		mustJSON(t, f.Data, &task)
		if task.ID != id || task.Env["WANDB_API_KEY"] != want {
			t.Errorf("%s sees %s, want env value %q", name, f.raw, want)
		}
		if bytes.Contains(f.raw, []byte(`"fence"`)) {
			t.Errorf("%s sees the fence: %s", name, f.raw)
		}
	}
}

// TestWS_ClosedWhenSignInEnds (issue 25): a WebSocket opened before its
// user was disabled (or signed out) is closed with 1008 within a recheck,
// as the user's next REST request would be refused; another user's stays.
func TestWS_ClosedWhenSignInEnds(t *testing.T) {
	e := newWSEnv(t, live.HubConfig{}, 200*time.Millisecond)
	e.user("root") // the first user, an admin: alice can be disabled
	tok, id := e.user("alice")
	bobTok, _ := e.user("bob")
	for _, end := range []func(){
		func() {
			on := true
			if _, err := e.st.UpdateUser(context.Background(), id, store.UserPatch{Disabled: &on}); err != nil {
				t.Fatal(err)
			}
		},
		func() { e.req("POST", "/api/auth/logout", tok, nil) },
	} {
		c := e.connect(tok)
		c.send(`{"op":"subscribe","topic":"/topic/tasks"}`)
		c.expect("subscribed", live.TopicTasks)
		end()
		var err error
		for err == nil { // frames may still come before the close
			_, err = c.tryRead()
		}
		if !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
			t.Fatalf("after the sign-in ended: want close 1008, got %v", err)
		}
		off := false
		if _, err := e.st.UpdateUser(context.Background(), id, store.UserPatch{Disabled: &off}); err != nil {
			t.Fatal(err)
		}
		tok, _ = e.login("alice", "password-alice")
	}
	bob := e.connect(bobTok)
	bob.send(`{"op":"subscribe","topic":"/topic/tasks"}`)
	bob.expect("subscribed", live.TopicTasks)
}
