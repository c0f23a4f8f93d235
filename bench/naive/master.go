// Package naive holds the benchmark references that speak rlsched's
// protocols the simplest possible way: a goroutine-per-connection net.Conn
// master (Challenge → sealed Hello → HelloAck, every frame after it sealed
// as the real master seals them, heartbeats → acks, dispatch from an
// in-memory queue, nothing durable) and a net/http server that performs the
// same SQLite insert as POST /api/train. They show what the machine and the
// protocol allow, so the real master can be judged against them in the
// same run. They are references, never production code.
package naive

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
)

// Config of the naive master.
type Config struct {
	Token    []byte
	Interval time.Duration // heartbeat interval told to workers
	LogDir   string        // output files (logs.go); "": acked, not stored
}

// Dispatcher is the naive master: it takes workers, places an in-memory
// queue on them and streams their output, the simplest way. Its methods are
// safe for concurrent use.
type Dispatcher struct {
	cfg    Config
	mu     sync.Mutex
	queue  []string // task ids, FIFO
	free   []*wconn // one entry per free slot
	nextID atomic.Int64
	logs   naiveLogs
}

type wconn struct {
	c    net.Conn
	id   string
	dead atomic.Bool
	wmu  sync.Mutex
	seal *codec.Sealer // nil until the Hello checked out
	buf  []byte
}

func (w *wconn) send(m proto.Message) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	var err error
	if w.seal != nil {
		w.buf, err = w.seal.AppendFrame(w.buf[:0], m)
	} else {
		w.buf, err = codec.AppendFrame(w.buf[:0], m)
	}
	if err != nil {
		return err
	}
	_, err = w.c.Write(w.buf)
	return err
}

// NewDispatcher returns a naive master.
func NewDispatcher(cfg Config) *Dispatcher { return &Dispatcher{cfg: cfg} }

// ServeRPC accepts workers on ln, one goroutine per connection.
func (m *Dispatcher) ServeRPC(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go m.serve(c)
	}
}

func (m *Dispatcher) serve(c net.Conn) {
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	w := &wconn{c: c}
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	if w.send(&pb.Challenge{Nonce: nonce[:], MasterId: "naive"}) != nil {
		return
	}
	br := bufio.NewReaderSize(c, 4096)
	frame, h, err := codec.ReadRaw(br, 16<<10, nil)
	if err != nil {
		return
	}
	var hello *pb.Hello
	var keys codec.Session
	err = fmt.Errorf("%s before Hello", h.Type)
	if h.Type == codec.TypeHello {
		hello, keys, err = codec.AcceptHello(frame, nonce[:], "naive", func(id string) ([]byte, error) {
			return codec.WorkerKey(m.cfg.Token, id), nil
		})
	}
	if hello == nil {
		_ = w.send(&pb.Goodbye{Reason: fmt.Sprintf("worker refused: %v", err)})
		return
	}
	w.id, w.seal = hello.GetWorkerId(), keys.Send
	if w.send(&pb.HelloAck{Session: w.id, HeartbeatIntervalMs: m.cfg.Interval.Milliseconds(),
		LeaseTtlMs: 120000, MasterId: "naive"}) != nil {
		return
	}
	defer w.dead.Store(true)
	m.addFree(w, int(hello.GetSlots()))
	var buf []byte
	for {
		var msg proto.Message
		msg, buf, err = codec.ReadFrame(br, codec.DefaultMaxBody, buf, keys.Recv)
		if err != nil {
			return
		}
		switch x := msg.(type) {
		case *pb.Heartbeat:
			err = w.send(&pb.HeartbeatAck{Seq: x.GetSeq()})
		case *pb.LogData:
			err = m.onLog(w, x)
		case *pb.TaskFinished:
			err = w.send(&pb.TaskFinishedAck{TaskId: x.GetTaskId(), Attempt: x.GetAttempt()})
			m.addFree(w, 1)
		}
		if err != nil {
			return
		}
	}
}

// addFree gives n slots of w back and dispatches what fits.
func (m *Dispatcher) addFree(w *wconn, n int) {
	m.mu.Lock()
	for range n {
		m.free = append(m.free, w)
	}
	pairs := m.pairLocked()
	m.mu.Unlock()
	m.send(pairs)
}

type pair struct {
	w  *wconn
	id string
}

func (m *Dispatcher) pairLocked() []pair {
	var out []pair
	for len(m.queue) > 0 && len(m.free) > 0 {
		w := m.free[len(m.free)-1]
		m.free = m.free[:len(m.free)-1]
		if w.dead.Load() {
			continue
		}
		out = append(out, pair{w, m.queue[0]})
		m.queue = m.queue[1:]
	}
	return out
}

func (m *Dispatcher) send(pairs []pair) {
	for _, p := range pairs {
		_ = p.w.send(&pb.ExecuteTask{TaskId: p.id, Attempt: 1, Fence: 1, Argv: []string{"/bin/true"}})
	}
}

// Submit queues n runs and dispatches what fits; it returns their ids.
func (m *Dispatcher) Submit(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "n" + strconv.FormatInt(m.nextID.Add(1), 10)
	}
	m.mu.Lock()
	m.queue = append(m.queue, ids...)
	pairs := m.pairLocked()
	m.mu.Unlock()
	m.send(pairs)
	return ids
}

// HTTPHandler serves POST /submit?n=N (default 1), answering {"ids": [...]}
// for n ≤ 1000 and {"queued": n} otherwise.
func (m *Dispatcher) HTTPHandler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" {
			m.serveWS(rw, r)
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/submit" {
			http.Error(rw, "POST /submit?n=N", http.StatusNotFound)
			return
		}
		n := 1
		if v := r.URL.Query().Get("n"); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n < 1 {
				http.Error(rw, "bad n", http.StatusBadRequest)
				return
			}
		}
		ids := m.Submit(n)
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusAccepted)
		if n <= 1000 {
			_ = json.NewEncoder(rw).Encode(map[string]any{"ids": ids})
			return
		}
		fmt.Fprintf(rw, "{\"queued\":%d}\n", n)
	})
}
