package httpapi

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
)

func TestWorkers(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	r := e.req("GET", "/api/workers", tok, nil)
	if r.status != 200 || string(r.body) != `{"items":[]}` {
		t.Fatalf("no workers: %d %s", r.status, r.body)
	}
	e.ctl.mu.Lock()
	e.ctl.workers = []core.WorkerInfo{
		{ID: "w1", Host: "h1", State: core.WorkerIdle, Slots: 1},
		{ID: "w2", Host: "h2", State: core.WorkerRunning, GPUs: []core.GPU{{Index: 0, Name: "A100", TaskID: "r1"}}, RunningTasks: []string{"r1"}},
	}
	e.ctl.mu.Unlock()
	r = e.req("GET", "/api/workers", tok, nil)
	var b struct {
		Items []core.WorkerInfo `json:"items"`
	}
	mustJSON(t, r.body, &b)
	if len(b.Items) != 2 || b.Items[1].GPUs[0].Name != "A100" {
		t.Fatalf("workers: %s", r.body)
	}
	if !strings.Contains(string(r.body), `"gpus":[]`) || !strings.Contains(string(r.body), `"runningTasks":[]`) {
		t.Fatalf("empty worker arrays must be []: %s", r.body)
	}
}

func TestHealth(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	e.submit(tok, `{"command":["a"]}`)
	e.submit(tok, `{"command":["a"]}`)
	e.ctl.mu.Lock()
	e.ctl.workers = []core.WorkerInfo{{ID: "w1", State: core.WorkerIdle}, {ID: "w2", State: core.WorkerIdle}, {ID: "w3", State: core.WorkerDown}}
	e.ctl.mu.Unlock()

	r := e.req("GET", "/api/monitor/health", "", nil)
	if r.status != 200 {
		t.Fatalf("health: %d %s", r.status, r.body)
	}
	var h struct {
		Status  string         `json:"status"`
		Master  string         `json:"master"`
		Version string         `json:"version"`
		Workers map[string]int `json:"workers"`
		Queue   struct {
			Queued int `json:"queued"`
		} `json:"queue"`
		Logpipe map[string]any `json:"logpipe"`
		Store   string         `json:"store"`
		Leases  string         `json:"leases"`
	}
	mustJSON(t, r.body, &h)
	want := map[string]int{"IDLE": 2, "RUNNING": 0, "PENDING": 0, "DOWN": 1, "DRAINING": 0}
	if h.Status != "UP" || h.Master != "master-test" || h.Version != core.Version || h.Store != "sqlite" ||
		h.Leases != "memory" || h.Queue.Queued != 2 || h.Logpipe == nil || sprint(h.Workers) != sprint(want) {
		t.Fatalf("health: %s", r.body)
	}

	// A closed store makes Ping fail: 503 DOWN.
	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	r = e.req("GET", "/api/monitor/health", "", nil)
	if r.status != http.StatusServiceUnavailable || r.json(t)["status"] != "DOWN" {
		t.Fatalf("health with a closed store: %d %s", r.status, r.body)
	}
	// Other requests answer 503, never 500.
	r = e.req("GET", "/api/tasks", tok, nil)
	if r.status != http.StatusServiceUnavailable || r.errCode(t) != "unavailable" {
		t.Fatalf("list with a closed store: %d %s", r.status, r.body)
	}
}

func TestPanicRecovered(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	e.ctl.mu.Lock()
	e.ctl.panicOnList = true
	e.ctl.mu.Unlock()
	rq, _ := http.NewRequest("GET", e.url+"/api/workers", nil)
	rq.Header.Set("Authorization", "Bearer "+tok)
	rs, err := e.client.Do(rq)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rs.Body)
	rs.Body.Close()
	r := resp{rs.StatusCode, rs.Header, b}
	if r.status != 500 || r.errCode(t) != "internal" {
		t.Fatalf("panic: %d %s", r.status, r.body)
	}
	if !strings.Contains(e.logs.String(), "workers exploded") {
		t.Fatal("the panic was not logged")
	}
	// The server still serves.
	if r := e.req("GET", "/api/auth/me", tok, nil); r.status != 200 {
		t.Fatalf("after a panic: %d", r.status)
	}
}

// rawExchange writes req on a fresh connection and reads one response.
func rawExchange(t *testing.T, addr, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	// The server may answer and close before it read everything; the
	// answer is what counts, so write in the background.
	go func() { _, _ = io.WriteString(c, req) }()
	rs, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	b, _ := io.ReadAll(rs.Body)
	rs.Body.Close()
	return rs, string(b)
}

func TestTransportErrors(t *testing.T) {
	e := newEnv(t)
	f := func(name, req string, wantStatus int, wantCode string) {
		t.Helper()
		rs, body := rawExchange(t, e.addr, req)
		if rs.StatusCode != wantStatus {
			t.Fatalf("%s: want %d, got %d %s", name, wantStatus, rs.StatusCode, body)
		}
		r := resp{rs.StatusCode, rs.Header, []byte(body)}
		if got := r.errCode(t); got != wantCode {
			t.Fatalf("%s: code %q, want %q", name, got, wantCode)
		}
	}
	// A declared length far over 1 MiB is refused before the body is read.
	f("content-length", fmt.Sprintf("POST /api/train HTTP/1.1\r\nHost: "+e.addr+"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 100*MaxBodySize),
		413, "payload_too_large")
	// A chunked body that grows past the limit.
	chunk := strings.Repeat("a", 64<<10)
	var sb strings.Builder
	sb.WriteString("POST /api/auth/register HTTP/1.1\r\nHost: " + e.addr + "\r\nTransfer-Encoding: chunked\r\n\r\n")
	for i := 0; i < 17; i++ {
		fmt.Fprintf(&sb, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	sb.WriteString("0\r\n\r\n")
	f("chunked", sb.String(), 413, "payload_too_large")
	f("bad escape", "GET /api/tasks/%zz HTTP/1.1\r\nHost: "+e.addr+"\r\n\r\n", 400, "bad_request")
	// A chunked body past fasthttp's own limit: the ErrorHandler's 413.
	var huge strings.Builder
	huge.WriteString("POST /api/train HTTP/1.1\r\nHost: " + e.addr + "\r\nTransfer-Encoding: chunked\r\n\r\n")
	for i := 0; i < 3*readBodyLimit/len(chunk); i++ {
		fmt.Fprintf(&huge, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	huge.WriteString("0\r\n\r\n")
	f("chunked past the hard limit", huge.String(), 413, "payload_too_large")
	f("garbage", "NOT HTTP AT ALL\r\n\r\n", 400, "bad_request")
	f("bad content-length", "POST /api/train HTTP/1.1\r\nHost: "+e.addr+"\r\nContent-Length: -5\r\n\r\n", 400, "bad_request")
}

// TestOversizedBodyAnsweredNotReset: a client that sends its whole body
// before it reads (as most do) can send it and then read the 413 with the
// error body, rather than see its connection reset mid-send, however far the
// body is over the limit (up to linger's cap). The body is larger than
// loopback's socket buffers, so the server must read it.
func TestOversizedBodyAnsweredNotReset(t *testing.T) {
	e := newEnv(t)
	body := strings.Repeat("x", 12<<20)
	for i := range 5 {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		_, werr := io.WriteString(c, fmt.Sprintf("POST /api/train HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			e.addr, len(body), body))
		if werr != nil { // what a client that stops at a failed write reports
			c.Close()
			t.Fatalf("attempt %d: the connection broke while sending: %v", i, werr)
		}
		rs, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			c.Close()
			t.Fatalf("attempt %d: no answer: %v", i, err)
		}
		b, _ := io.ReadAll(rs.Body)
		rs.Body.Close()
		c.Close()
		r := resp{rs.StatusCode, rs.Header, b}
		if rs.StatusCode != 413 || r.errCode(t) != "payload_too_large" {
			t.Fatalf("attempt %d: %d %s", i, rs.StatusCode, b)
		}
	}
}
