package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fasthttp/websocket"
)

func TestDetachScan(t *testing.T) {
	f := func(in string, escaped bool, want string, wantEsc, wantDetached bool) {
		t.Helper()
		out, esc, det := detachScan([]byte(in), escaped)
		if string(out) != want || esc != wantEsc || det != wantDetached {
			t.Errorf("detachScan(%q, %v) = %q, %v, %v; want %q, %v, %v", in, escaped, out, esc, det, want, wantEsc, wantDetached)
		}
	}
	f("ls\r", false, "ls\r", false, false)
	f("ls\r\x1dd", false, "ls\r", false, true)
	f("\x1d", false, "", true, false) // split across reads...
	f("d", true, "", false, true)     // ...still detaches
	f("\x1d\x1d", false, "\x1d", false, false)
	f("a\x1dx", false, "a\x1dx", false, false)
	f("x", true, "\x1dx", false, false)
	f("dd", false, "dd", false, false)
}

// A dropped connection (no close frame) is reattached by itself; the
// server's ring brings the screen back, and the session's end ends the
// command with its status.
func TestAttach_ReattachesAfterADrop(t *testing.T) {
	var conns atomic.Int32
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ws/sessions/r1" {
			http.NotFound(w, r)
			return
		}
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		if conns.Add(1) == 1 {
			_ = c.WriteMessage(websocket.BinaryMessage, []byte("before the drop\r\n"))
			c.UnderlyingConn().Close()
			return
		}
		_ = c.WriteMessage(websocket.BinaryMessage, []byte("before the drop\r\nafter the drop\r\n"))
		_ = c.WriteMessage(websocket.TextMessage, []byte(`{"ended":{"status":"SUCCEEDED","exitCode":0}}`))
		_, _, _ = c.ReadMessage() // until the client closes
	}))
	t.Cleanup(srv.Close)
	h := newHarness(t)
	h.vars["RLSCHED_SERVER"], h.vars["RLSCHED_TOKEN"] = srv.URL, "tok"
	out, errs := h.mustRun(0, "attach", "r1")
	if conns.Load() != 2 || !strings.Contains(out, "after the drop") || !strings.Contains(errs, "reattaching") ||
		!strings.Contains(errs, "SUCCEEDED") {
		t.Fatalf("%d connections; stdout %q; stderr %q", conns.Load(), out, errs)
	}
}
