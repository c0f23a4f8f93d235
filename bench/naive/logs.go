package naive

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fasthttp/websocket"

	"github.com/rlsched/rlsched/codec/pb"
)

// The naive log path, the reference of the `logs` scenario: the connection's
// goroutine takes one mutex for everything, writes each line of a LogData
// frame with its own write(2) to LOG_DIR/<id>.log, sends each line to every
// WebSocket subscriber of the run as its own frame (API.md's format), and
// acks. Offsets are honoured (bytes already written are dropped, a frame
// from the future is answered "gap"), so the worker's side is the same.

type naiveLogs struct {
	mu   sync.Mutex
	runs map[string]*naiveRun
	subs map[string][]*websocket.Conn // run id → subscribers
}

type naiveRun struct {
	f    *os.File
	next uint64
}

type wsFrame struct {
	Topic  string `json:"topic"`
	Type   string `json:"type"`
	Offset uint64 `json:"offset"`
	Data   string `json:"data,omitempty"`
}

func (m *Dispatcher) onLog(w *wconn, ld *pb.LogData) error {
	if m.cfg.LogDir == "" {
		return w.send(&pb.LogAck{TaskId: ld.GetTaskId(), Attempt: ld.GetAttempt(), Offset: ld.GetOffset() + uint64(len(ld.GetData()))})
	}
	id := ld.GetTaskId()
	if strings.ContainsAny(id, "/\\") || id == "" || id[0] == '.' {
		return w.send(&pb.LogAck{TaskId: id, Attempt: ld.GetAttempt(), Error: "fenced"})
	}
	l := &m.logs
	l.mu.Lock()
	if l.runs == nil {
		l.runs, l.subs = map[string]*naiveRun{}, map[string][]*websocket.Conn{}
	}
	r := l.runs[id]
	if r == nil {
		f, err := os.OpenFile(filepath.Join(m.cfg.LogDir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			l.mu.Unlock()
			return w.send(&pb.LogAck{TaskId: id, Attempt: ld.GetAttempt(), Offset: ld.GetOffset(), Error: err.Error()})
		}
		r = &naiveRun{f: f}
		l.runs[id] = r
	}
	off, data := ld.GetOffset(), ld.GetData()
	if off > r.next {
		next := r.next
		l.mu.Unlock()
		return w.send(&pb.LogAck{TaskId: id, Attempt: ld.GetAttempt(), Offset: next, Error: "gap"})
	}
	if skip := r.next - off; skip < uint64(len(data)) {
		data, off = data[skip:], r.next
	} else {
		data = nil
	}
	topic := "/topic/logs/" + id
	for len(data) > 0 {
		n := bytes.IndexByte(data, '\n') + 1
		if n == 0 {
			n = len(data)
		}
		line := data[:n]
		if _, err := r.f.Write(line); err != nil {
			next := r.next
			l.mu.Unlock()
			return w.send(&pb.LogAck{TaskId: id, Attempt: ld.GetAttempt(), Offset: next, Error: err.Error()})
		}
		if subs := l.subs[id]; len(subs) > 0 {
			b, _ := json.Marshal(wsFrame{Topic: topic, Type: "log", Offset: off, Data: string(line)})
			keep := subs[:0]
			for _, c := range subs {
				if c.WriteMessage(websocket.TextMessage, b) == nil {
					keep = append(keep, c)
				}
			}
			l.subs[id] = keep
		}
		r.next += uint64(n)
		off += uint64(n)
		data = data[n:]
	}
	next := r.next
	l.mu.Unlock()
	return w.send(&pb.LogAck{TaskId: id, Attempt: ld.GetAttempt(), Offset: next})
}

// serveWS answers {"op":"subscribe","topic":"/topic/logs/<id>"} with
// {"type":"subscribed",...} and then the run's live lines; no history, no
// authentication, no lagged.
func (m *Dispatcher) serveWS(rw http.ResponseWriter, r *http.Request) {
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	c, err := up.Upgrade(rw, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	l := &m.logs
	for {
		var op struct{ Op, Topic string }
		if err := c.ReadJSON(&op); err != nil {
			return
		}
		id, ok := strings.CutPrefix(op.Topic, "/topic/logs/")
		if op.Op != "subscribe" || !ok {
			continue
		}
		l.mu.Lock()
		if l.subs == nil {
			l.runs, l.subs = map[string]*naiveRun{}, map[string][]*websocket.Conn{}
		}
		l.subs[id] = append(l.subs[id], c)
		err := c.WriteJSON(wsFrame{Topic: op.Topic, Type: "subscribed"})
		l.mu.Unlock()
		if err != nil {
			return
		}
	}
}
