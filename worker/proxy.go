package worker

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/tunnel"
)

// The worker's side of an interactive run's web app (issue 34,
// docs/interactive.md): a ProxyOpen from the master becomes a TCP
// connection to the app on this machine's loopback, at the run's
// RLSCHED_PORT, joined to the stream (package tunnel). Nothing listens
// for the network here: the master reaches the app only through the
// connection the worker made.

// appDialTimeout bounds the connection to the app.
const appDialTimeout = 10 * time.Second

// appPort is the port an interactive run's env names; 0: none.
func appPort(env map[string]string) int {
	p, err := strconv.Atoi(env[core.PortEnv])
	if err != nil || p < 1 || p > 65535 {
		return 0
	}
	return p
}

// appPortOf is the web app's port of the run a ProxyOpen names, if it is
// the current attempt under that fence and runs; why otherwise.
func (t *runTable) appPortOf(m *pb.ProxyOpen) (int, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.termRunLocked(m.GetTaskId(), m.GetAttempt(), m.GetFence())
	switch {
	case r == nil:
		return 0, "the session is not running on this worker (it ended, or a newer attempt holds it)"
	case r.term.port == 0:
		return 0, "the session has no web app (it was not submitted with a port)"
	}
	return r.term.port, ""
}

// proxySender queues a stream's frames for the session's writer.
type proxySender struct {
	s      *session
	taskID string
}

func (p proxySender) queue(m proto.Message) error {
	if p.s.closed() {
		return net.ErrClosed
	}
	p.s.pmu.Lock()
	p.s.pout = append(p.s.pout, m)
	p.s.pmu.Unlock()
	p.s.a.kick()
	return nil
}

func (p proxySender) Data(stream, off uint64, data []byte) error {
	return p.queue(&pb.ProxyData{TaskId: p.taskID, Stream: stream, Offset: off, Data: append([]byte(nil), data...)})
}

func (p proxySender) Ack(stream, off uint64) error {
	return p.queue(&pb.ProxyAck{TaskId: p.taskID, Stream: stream, Offset: off})
}

func (p proxySender) Close(stream uint64, why string) error {
	return p.queue(&pb.ProxyClose{TaskId: p.taskID, Stream: stream, Error: why})
}

// flushProxies writes the streams' queued frames. Writer goroutine.
func (s *session) flushProxies(w *frameWriter) error {
	s.pmu.Lock()
	out := s.pout
	s.pout = nil
	s.pmu.Unlock()
	for _, m := range out {
		if err := s.write(w, m); err != nil {
			return err
		}
	}
	return nil
}

// proxyOpen opens the stream a ProxyOpen asks for. Reader goroutine: the
// connection to the app is made on a goroutine of its own.
func (s *session) proxyOpen(m *pb.ProxyOpen) {
	snd := proxySender{s: s, taskID: m.GetTaskId()}
	st := s.proxies.Open(m.GetStream(), snd)
	if st == nil {
		_ = snd.Close(m.GetStream(), "stream id already open on this connection")
		return
	}
	port, why := s.a.tab.appPortOf(m)
	if port == 0 {
		st.Fail(errors.New(why))
		return
	}
	go s.joinApp(st, snd, port)
}

// joinApp connects to the app and copies both ways until either ends.
func (s *session) joinApp(st *tunnel.Stream, snd proxySender, port int) {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), appDialTimeout)
	if err != nil {
		st.Fail(fmt.Errorf("cannot connect to the session's app on port %d of its worker (is it listening yet? it may still be starting): %v", port, err))
		return
	}
	// The ack of offset 0 tells the master the app's connection is open.
	if err := snd.Ack(st.ID(), 0); err != nil {
		c.Close()
		st.Fail(err)
		return
	}
	go func() {
		_, _ = io.Copy(c, st) // the master's bytes; its close ends the app's connection
		c.Close()
	}()
	_, err = io.Copy(st, c)
	c.Close()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		st.Fail(fmt.Errorf("the connection to the session's app failed: %v", err))
		return
	}
	st.Close()
}
