package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// wsLogLines is how many lines the run prints, in two bursts with a pause
// between, so the tail gets both history (read from the file) and live
// frames.
const wsLogLines = 60000

// TestProcessWebSocketLogTail follows a run's log over /ws through a real
// gateway in front of a real master and worker: every byte arrives once, in
// order; a client that closes makes the gateway close its upstream side;
// a master that stops closes the client.
func TestProcessWebSocketLogTail(t *testing.T) {
	b := newBed(t)
	m := b.startMaster("m1", 0)
	b.StartWorker("w1", m.RPC, rig.WorkerOpts{})
	alice := registerOn(t, []*master{m}, "alice")
	g := b.StartGateway("gw", nil, "--masters", m.URL)
	wsURL := "ws" + strings.TrimPrefix(g.URL, "http") + "/ws"

	half := wsLogLines / 2
	script := fmt.Sprintf("seq -f 'line %%06g of a tail through the gateway' 1 %d; sleep 1; seq -f 'line %%06g of a tail through the gateway' %d %d",
		half, half+1, wsLogLines)
	body, _ := json.Marshal(map[string]any{"name": "ws-tail", "command": []string{"/bin/sh", "-c", script}})
	a := do(t, "POST", g.URL+"/api/train", string(body), bearer(alice.token)...)
	if a.Status != 202 {
		t.Fatalf("submit: %d %s", a.Status, a.Body)
	}
	var sub struct{ ID string }
	a.JSON(t, &sub)

	// Subscribed before the run starts: the JWT goes in the Authorization
	// header, which the gateway verifies and turns into signed identity.
	tail := dialWS(t, wsURL, alice.token, "ws-tail-1")
	if err := tail.WriteJSON(map[string]any{"op": "subscribe", "topic": "/topic/logs/" + sub.ID, "offset": 0}); err != nil {
		t.Fatal(err)
	}
	var got []byte
	lagged := 0
	last := []byte(fmt.Sprintf("line %06d of a tail through the gateway\n", wsLogLines))
	for !bytes.HasSuffix(got, last) {
		_ = tail.SetReadDeadline(time.Now().Add(60 * time.Second))
		_, msg, err := tail.ReadMessage()
		if err != nil {
			t.Fatalf("tail broke after %d bytes: %v", len(got), err)
		}
		var f struct {
			Type   string `json:"type"`
			Topic  string `json:"topic"`
			Offset int    `json:"offset"`
			Data   string `json:"data"`
		}
		if err := json.Unmarshal(msg, &f); err != nil {
			t.Fatalf("frame is not JSON: %q", msg)
		}
		switch f.Type {
		case "log":
			if f.Topic != "/topic/logs/"+sub.ID {
				t.Fatalf("log frame of another topic: %s", msg[:min(len(msg), 200)])
			}
			if f.Offset != len(got) {
				t.Fatalf("frame at offset %d with %d bytes held: bytes lost, repeated or out of order", f.Offset, len(got))
			}
			got = append(got, f.Data...)
		case "lagged":
			// The contract lets a slow reader be skipped ahead; it fetches
			// the gap over REST, through the gateway too.
			lagged++
			r := do(t, "GET", fmt.Sprintf("%s/api/monitor/logs/%s?offset=%d&limit=%d", g.URL, sub.ID, len(got), f.Offset-len(got)), "",
				append(bearer(alice.token), "Accept", "text/plain")...)
			if r.Status != 200 || len(r.Body) != f.Offset-len(got) {
				t.Fatalf("gap fetch: %d, %d bytes, want %d", r.Status, len(r.Body), f.Offset-len(got))
			}
			got = append(got, r.Body...)
		case "error":
			t.Fatalf("error frame: %s", msg)
		}
	}
	// The log is complete once the run has ended (TaskFinished follows the
	// last ack): the tail must be exactly the file.
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		st := runStatus(t, g.URL, alice.token, sub.ID)
		return st == "SUCCEEDED", "run is " + st
	})
	want, err := os.ReadFile(filepath.Join(m.Opts.DataDir, "logs", sub.ID+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the tail (%d bytes) differs from the log file (%d bytes)", len(got), len(want))
	}
	checkTailLines(t, got)
	t.Logf("%d bytes tailed through the gateway, %d lagged notices", len(got), lagged)

	// The client closes: the gateway ends the tunnel, closing the master's side.
	_ = tail.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "done"), time.Now().Add(time.Second))
	tail.Close()
	waitTraceLog(t, g.Proc, "websocket closed", "ws-tail-1")
	testutil.Eventually(t, 10*time.Second, func() (bool, string) {
		v := gaugeValue(t, g.URL, "rlsched_gateway_websockets_active")
		return v == "0", "websockets_active is " + v
	})

	// The master stops: its close reaches the client through the gateway.
	live := dialWS(t, wsURL, alice.token, "ws-tail-2")
	if err := live.WriteJSON(map[string]any{"op": "subscribe", "topic": "/topic/tasks"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() (bool, string) {
		v := gaugeValue(t, g.URL, "rlsched_gateway_websockets_active")
		return v == "1", "websockets_active is " + v
	})
	m.Stop(t, syscall.SIGTERM, 15*time.Second)
	_ = live.SetReadDeadline(time.Now().Add(15 * time.Second))
	for {
		_, _, err := live.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
			t.Fatalf("after the master stopped the client read %v; want the master's close 1001", err)
		}
		break
	}
	live.Close()
	waitTraceLog(t, g.Proc, "websocket closed", "ws-tail-2")
}

func dialWS(t *testing.T, url, token, trace string) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	c, resp, err := d.Dial(url, http.Header{"Authorization": {"Bearer " + token}, "X-Trace-Id": {trace}})
	if err != nil {
		st := 0
		if resp != nil {
			st = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (HTTP %d)", url, err, st)
	}
	if resp.Header.Get("X-Trace-Id") != trace {
		t.Errorf("upgrade answer has trace id %q, want %q", resp.Header.Get("X-Trace-Id"), trace)
	}
	return c
}

func runStatus(t *testing.T, gwURL, token, id string) string {
	t.Helper()
	a := do(t, "GET", gwURL+"/api/tasks/"+id, "", bearer(token)...)
	var task struct{ Status string }
	a.JSON(t, &task)
	switch task.Status {
	case "FAILED", "CANCELLED", "TIMEOUT", "LOST":
		t.Fatalf("run ended %s: %s", task.Status, a.Body)
	}
	return task.Status
}

// checkTailLines checks the tail is the trace line, then every numbered
// line once, in order.
func checkTailLines(t *testing.T, got []byte) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(got))
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "TRACE_ID:") {
		t.Fatalf("the tail does not start with the trace id line: %q", got[:min(len(got), 80)])
	}
	n := 0
	for sc.Scan() {
		n++
		if want := fmt.Sprintf("line %06d of a tail through the gateway", n); sc.Text() != want {
			t.Fatalf("line %d is %q, want %q", n+1, sc.Text(), want)
		}
	}
	if n != wsLogLines {
		t.Fatalf("%d numbered lines, want %d", n, wsLogLines)
	}
}

// waitTraceLog waits for p's JSON log line msg carrying traceId trace.
func waitTraceLog(t *testing.T, p *proc, msg, trace string) {
	t.Helper()
	p.WaitLog(t, 15*time.Second, fmt.Sprintf("%q for trace %s", msg, trace), func(l logLine) bool {
		return l.Msg() == msg && l.Str("traceId") == trace
	})
}

// gaugeValue reads one unlabelled series from the gateway's /metrics.
func gaugeValue(t *testing.T, gwURL, name string) string {
	t.Helper()
	a := do(t, "GET", gwURL+"/metrics", "")
	for _, l := range strings.Split(string(a.Body), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return "absent (" + fmt.Sprint(a.Status) + ")"
}
