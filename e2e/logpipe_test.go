package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// seqScript prints `seq 1 2000000` in 20 slices with pauses, so the master
// can be killed while the output is still streaming.
const seqScript = `import sys, time
n = 2000000
for part in range(20):
    lo = part * n // 20 + 1
    hi = (part + 1) * n // 20
    sys.stdout.write("".join("%d\n" % i for i in range(lo, hi + 1)))
    sys.stdout.flush()
    time.sleep(0.15)
`

func seqOutput() []byte {
	var b bytes.Buffer
	for i := 1; i <= 2000000; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// wsTail follows /topic/logs/<id> and keeps every byte by offset; after a
// disconnect it resubscribes from the next offset it lacks.
type wsTail struct {
	t    *testing.T
	got  []byte
	conn *websocket.Conn
}

func (w *wsTail) connect(base, token, id string) error {
	u, _ := url.Parse(base)
	u.Scheme, u.Path, u.RawQuery = "ws", "/ws", "token="+url.QueryEscape(token)
	c, _, err := websocket.DefaultDialer.Dial(u.String(), nil)
	if err != nil {
		return err
	}
	w.conn = c
	return c.WriteJSON(map[string]any{"op": "subscribe", "topic": "/topic/logs/" + id, "offset": len(w.got)})
}

// read consumes frames until the connection fails or want bytes arrived.
func (w *wsTail) read(want int, c *client, id string) error {
	for len(w.got) < want {
		_ = w.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, msg, err := w.conn.ReadMessage()
		if err != nil {
			return err
		}
		var f struct {
			Type   string `json:"type"`
			Offset int    `json:"offset"`
			Data   string `json:"data"`
			Error  any    `json:"error"`
		}
		if err := json.Unmarshal(msg, &f); err != nil {
			w.t.Fatalf("bad frame %q: %v", msg, err)
		}
		switch f.Type {
		case "log":
			if f.Offset > len(w.got) {
				w.t.Fatalf("gap: frame at %d, have %d", f.Offset, len(w.got))
			}
			if end := f.Offset + len(f.Data); end > len(w.got) {
				w.got = append(w.got, f.Data[len(w.got)-f.Offset:]...)
			} else {
				w.t.Fatalf("byte delivered twice: frame [%d,%d) with %d bytes held", f.Offset, end, len(w.got))
			}
		case "lagged": // fell behind: fetch the gap over REST, as a browser would
			r, err := c.Do("GET", fmt.Sprintf("/api/monitor/logs/%s?offset=%d&limit=%d", id, len(w.got), f.Offset-len(w.got)), nil, "Accept", "text/plain")
			if err != nil || r.Status != 200 {
				return fmt.Errorf("gap fetch: %v %v", r, err)
			}
			w.got = append(w.got, r.Body...)
		case "error":
			w.t.Fatalf("error frame %s", msg)
		}
	}
	return nil
}

// TestLogExactAcrossMasterKill: 2,000,000 lines of seq reach the log file
// byte for byte although the master is SIGKILLed mid-stream and restarted,
// and a WebSocket subscriber that reconnects with its offset sees each byte
// exactly once.
func TestLogExactAcrossMasterKill(t *testing.T) {
	b := newBed(t)
	pinned, m1, alice := b.startPinned(t)
	data := pinned.DataDir
	id, traceID := b.submit(alice, map[string]any{"command": []string{"python3", "-c", seqScript}})
	header := "TRACE_ID:" + traceID + "\n"
	want := append([]byte(header), seqOutput()...)

	tail := &wsTail{t: t}
	if err := tail.connect(m1.URL, alice.Token, id); err != nil {
		t.Fatal(err)
	}
	// Read a first part live, then kill the master in the middle of the stream.
	if err := tail.read(3<<20, alice, id); err != nil {
		t.Fatalf("before the kill: %v", err)
	}
	m1.Kill(t)
	tail.conn.Close()
	m2 := b.StartMaster("master-2", pinned)
	m2.WaitJoined(t, "w1")
	final := alice.waitStatus(id, "SUCCEEDED", 90*time.Second)
	if final.Attempt != 1 {
		t.Errorf("attempt %d, want 1: the run must not be rerun", final.Attempt)
	}
	body, err := os.ReadFile(filepath.Join(data, "logs", id+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, want) {
		t.Fatalf("log file differs: %d bytes, want %d; first difference at %d", len(body), len(want), firstDiff(body, want))
	}
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		if err := tail.connect(m2.URL, alice.Token, id); err != nil {
			return false, err.Error()
		}
		err := tail.read(len(want), alice, id)
		tail.conn.Close()
		return err == nil, fmt.Sprintf("resume from %d: %v", len(tail.got), err)
	})
	if !bytes.Equal(tail.got, want) {
		t.Fatalf("WebSocket bytes differ: %d, want %d; first difference at %d", len(tail.got), len(want), firstDiff(tail.got, want))
	}
	if strings.Count(string(body), "\n") != 2000001 {
		t.Fatal("line count")
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
