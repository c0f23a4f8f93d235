package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/rlsched/rlsched/internal/backoff"
)

// `logs -f` follows a run through the server's WebSocket (API.md "WebSocket
// /ws"): subscribe to /topic/logs/<id> from the offset, print each log
// frame's bytes once (frames carry offsets, so a repeat is cut off and a
// hole is fetched over REST), reconnect from the last offset when the
// connection drops, and stop once the run has ended and its log is drained
// (the status is read over REST whenever the stream is idle; the tail is
// drained over REST). Servers without /ws get the REST poll.

// errNoWebSocket: the server answered the upgrade with something other than
// an authentication error (no /ws, the hub is off, a proxy without
// upgrades): poll REST instead.
var errNoWebSocket = errors.New("the server offers no WebSocket")

// followLogs writes run id's log from offset on until the run has ended and
// its log is drained.
func (inv *invocation) followLogs(c *client, id string, offset int64) error {
	t, _, err := c.getTask(inv.ctx, id)
	if err != nil {
		return err
	}
	if t.Status.Terminal() {
		return inv.pollLogs(c, id, offset, 0)
	}
	f := &wsFollower{inv: inv, c: c, id: id, offset: offset}
	err = f.run()
	if errors.Is(err, errNoWebSocket) {
		return inv.pollLogs(c, id, f.offset, 0)
	}
	return err
}

// wsFollower is one `logs -f` over the WebSocket.
type wsFollower struct {
	inv    *invocation
	c      *client
	id     string
	offset int64 // the next byte to print
}

// statusEvery is how long the stream may stay idle before the run's status
// is read.
func (f *wsFollower) statusEvery() time.Duration { return 5 * f.inv.env.logsEvery }

func (f *wsFollower) run() error {
	out := outage{inv: f.inv}
	for {
		conn, err := f.dial()
		if err != nil {
			if errors.Is(err, errNoWebSocket) || !out.failed(err) {
				return err
			}
			if !backoff.Sleep(f.inv.ctx, f.statusEvery()) {
				return interruptedErr(f.c)
			}
			continue
		}
		start, since := f.offset, f.inv.env.now()
		ended, err := f.session(conn)
		conn.Close()
		switch {
		case ended:
			return f.inv.pollLogs(f.c, f.id, f.offset, 0) // the tail, then eof
		case interrupted(err) || !transient(err):
			return err
		case f.offset > start || f.inv.env.now().Sub(since) > 2*f.statusEvery():
			out.ok() // it dropped after a good while: come back at once
			continue
		}
		// It dropped at once: count it as an outage.
		if !out.failed(err) {
			return err
		}
		if !backoff.Sleep(f.inv.ctx, f.statusEvery()) {
			return interruptedErr(f.c)
		}
	}
}

// dial opens the server's /ws, the token as ?token= as the dashboard
// sends it; a server that refuses it for another reason than the token
// (an older one, a proxy without WebSockets) is errNoWebSocket: the logs
// are read by polling then.
func (f *wsFollower) dial() (*websocket.Conn, error) {
	var q url.Values
	if f.c.token != "" {
		q = url.Values{"token": {f.c.token}}
	}
	conn, err := f.c.dialWS(f.inv.ctx, "/ws", q)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status != http.StatusUnauthorized && ae.Status != http.StatusForbidden {
		return nil, errNoWebSocket
	}
	return conn, err
}

// wsFrame is a server message.
type wsFrame struct {
	Topic      string `json:"topic"`
	Type       string `json:"type"`
	Offset     *int64 `json:"offset"`
	NextOffset *int64 `json:"nextOffset"`
	Data       string `json:"data"`
	Error      *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// session subscribes on conn and prints until the run has ended (ended),
// the connection fails (a transient *netError) or the server refuses.
func (f *wsFollower) session(conn *websocket.Conn) (ended bool, err error) {
	topic := "/topic/logs/" + f.id
	sub, _ := json.Marshal(map[string]any{"op": "subscribe", "topic": topic, "offset": f.offset})
	if err := conn.WriteMessage(websocket.TextMessage, sub); err != nil {
		return false, &netError{Server: f.c.base, Err: err}
	}
	frames := make(chan []byte, 64)
	readErr := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // the only reader; it answers pings as it reads
		for {
			_, b, err := conn.ReadMessage()
			if err != nil {
				readErr <- err
				return
			}
			select {
			case frames <- b:
			case <-stop:
				return
			}
		}
	}()

	idle := time.NewTimer(f.statusEvery())
	defer idle.Stop()
	busy := false // frames came since the last status read
	for {
		select {
		case <-f.inv.ctx.Done():
			return false, interruptedErr(f.c)
		case err := <-readErr:
			// Frames read before the break come first: resume after them.
			for len(frames) > 0 {
				if err := f.frame(topic, <-frames); err != nil {
					return false, err
				}
			}
			return false, &netError{Server: f.c.base, Err: fmt.Errorf("the live log stream broke: %w", err)}
		case b := <-frames:
			busy = true
			if err := f.frame(topic, b); err != nil {
				return false, err
			}
		case <-idle.C:
			if !busy {
				t, _, err := f.c.getTask(f.inv.ctx, f.id)
				switch {
				case err == nil && t.Status.Terminal():
					return true, nil
				case err != nil && !transient(err):
					return false, err
				}
			}
			busy = false
			idle.Reset(f.statusEvery())
		}
	}
}

// frame handles one server message.
func (f *wsFollower) frame(topic string, b []byte) error {
	var fr wsFrame
	if json.Unmarshal(b, &fr) != nil || (fr.Topic != topic && fr.Type != "error") {
		return nil // not ours; say nothing
	}
	switch fr.Type {
	case "log":
		if fr.Offset == nil {
			return nil
		}
		return f.write(*fr.Offset, fr.NextOffset, fr.Data)
	case "lagged":
		// The server skipped us ahead: fetch what we missed over REST.
		if fr.Offset != nil && *fr.Offset > f.offset {
			return f.fill(*fr.Offset)
		}
	case "error":
		if fr.Error == nil {
			return errors.New("the server refused to stream the log")
		}
		ae := &apiError{Code: fr.Error.Code, Message: fr.Error.Message, Status: http.StatusBadRequest}
		if fr.Error.Code == "not_found" {
			ae.Status, ae.Hint = http.StatusNotFound, "list your runs with `rlsched ls`"
		}
		return ae
	}
	return nil
}

// write prints the bytes of data that come after the offset. next is the
// offset after data (nil from a server that does not say).
func (f *wsFollower) write(off int64, next *int64, data string) error {
	end := off + int64(len(data))
	if next != nil {
		end = *next
	}
	if end <= f.offset {
		return nil // printed already
	}
	if off > f.offset {
		if err := f.fill(off); err != nil {
			return err
		}
		if end <= f.offset {
			return nil
		}
	}
	b := data
	if off < f.offset {
		// Cut what was printed. Offsets count the log's bytes; data has
		// as many unless the server replaced bytes that were not UTF-8.
		keep := end - f.offset
		if int64(len(b)) == end-off {
			b = b[f.offset-off:]
		} else if keep < int64(len(b)) {
			b = b[int64(len(b))-keep:]
		}
	}
	if _, err := io.WriteString(f.inv.env.Stdout, b); err != nil {
		return fmt.Errorf("cannot write the output: %w", err)
	}
	f.offset = end
	return nil
}

// fill prints the log from the offset up to at least to, over REST. A hole
// REST cannot fill either is reported and skipped.
func (f *wsFollower) fill(to int64) error {
	lc := &logCursor{c: f.c, id: f.id, offset: f.offset, out: f.inv.env.Stdout}
	for lc.offset < to {
		lc.limit = to - lc.offset
		n, _, err := lc.fetch(f.inv)
		if err != nil {
			f.offset = lc.offset
			return err
		}
		if n == 0 {
			f.inv.errorf("warning: bytes %d to %d of the log are missing", lc.offset, to)
			lc.offset = to
		}
	}
	f.offset = lc.offset
	return nil
}
