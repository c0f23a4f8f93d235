package worker

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/tunnel"
	"github.com/rlsched/rlsched/worker/nvsmi"
	"github.com/rlsched/rlsched/worker/outputs"
)

const (
	// logFlushInterval is the batching delay of output (≈50 ms or 64 KiB).
	logFlushInterval = 50 * time.Millisecond
	// logWindow is the credit window of a connection: the output bytes of
	// all runs together sent and not yet acked. It bounds what the master
	// buffers for this worker; a slow master disk slows the acks, so the
	// sending, so the runs (through their spools), never the master. A
	// master may grant less (HelloAck and LogAck log_window), to share its
	// queue among many workers; never more.
	logWindow = 4 << 20
	// passBudget bounds the output bytes one writer pass collects.
	passBudget = 1 << 20
	// writeTimeout bounds one batch of writes; a connection that cannot
	// take it is dead.
	writeTimeout = 10 * time.Second
	// ctrlQueue bounds queued heartbeats.
	ctrlQueue = 16
)

// session is one joined connection: a reader goroutine (serve's own), a
// writer goroutine, and a heartbeat ticker. Only the writer writes to conn.
// Run output and reports are not queued here: the writer pulls them from the
// runs, so nothing a run does ever waits for the connection.
type session struct {
	a        *agent
	conn     net.Conn
	seal     *codec.Sealer // the writer's
	open     *codec.Opener // the reader's
	addr     string
	log      zerolog.Logger
	interval time.Duration

	ctrl      chan proto.Message // heartbeats, bounded
	done      chan struct{}
	closeOnce sync.Once

	// Guarded by runTable.mu.
	seq    uint64
	hbSent map[uint64]sentAt // heartbeat seq → send time, until acked
	// renewed is the send time of the latest renewal (its Hello, then a
	// Heartbeat) this session's master acked: an ExecuteTask read on this
	// connection was claimed no earlier than about then (see leaseLeftLocked).
	renewed sentAt

	// Heartbeat goroutine only: gpuSeq is the Seq of the last GPU sample
	// sent on this session (0: none yet), gpuSent that sample
	// (gpusample.go).
	gpuSeq  uint64
	gpuSent *nvsmi.Sample
	// usageAt is when the last sample of the runs' usage alone (a worker
	// that does not sample GPUs) was sent on this session.
	usageAt time.Time

	// The streams to interactive runs' web apps opened on this connection
	// (proxy.go), and their frames waiting for the writer.
	proxies *tunnel.Set
	pmu     sync.Mutex
	pout    []proto.Message
}

func newSession(a *agent, conn net.Conn, addr string, ack *pb.HelloAck, keys codec.Session) *session {
	interval := time.Duration(ack.GetHeartbeatIntervalMs()) * time.Millisecond
	if interval <= 0 {
		interval = a.cfg.HeartbeatInterval
	}
	return &session{
		a:        a,
		conn:     conn,
		seal:     keys.Send,
		open:     keys.Recv,
		addr:     addr,
		log:      a.log.With().Str("master", addr).Logger(),
		interval: interval,
		ctrl:     make(chan proto.Message, ctrlQueue),
		done:     make(chan struct{}),
		hbSent:   map[uint64]sentAt{},
		proxies:  tunnel.NewSet(),
	}
}

// close ends the session. Safe from any goroutine, any number of times.
func (s *session) close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.conn.Close()
		s.proxies.CloseAll("the worker's connection to its master closed")
	})
}

func (s *session) closed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// serve runs the session until the connection fails or the master says
// Goodbye, and returns why.
func (s *session) serve(br *bufio.Reader, ack *pb.HelloAck, helloSent sentAt) error {
	s.a.tab.adopt(s, ack, helloSent)
	var wg sync.WaitGroup
	wg.Go(s.writeLoop)
	wg.Go(s.heartbeatLoop)
	err := s.readLoop(br)
	s.close()
	wg.Wait()
	s.a.tab.detach(s)
	return err
}

// readLoop reads and handles frames until an error. Every frame's tag is
// checked before it is handled: one that fails ends the connection.
func (s *session) readLoop(br *bufio.Reader) error {
	idle := 3*s.interval + 5*time.Second
	var buf []byte
	for {
		_ = s.conn.SetReadDeadline(time.Now().Add(idle))
		m, b, err := codec.ReadFrame(br, codec.DefaultMaxBody, buf, s.open)
		buf = b
		if err != nil {
			if s.closed() {
				return errors.New("connection closed by the worker")
			}
			if errors.Is(err, codec.ErrTag) || errors.Is(err, codec.ErrUnsealed) {
				return fmt.Errorf("closing the connection: a frame from master %s is not authenticated, so it is not obeyed: %w", s.addr, err)
			}
			return fmt.Errorf("cannot read from master: %w", err)
		}
		switch m := m.(type) {
		case *pb.ExecuteTask:
			s.a.execute(s, m)
		case *pb.CancelTask:
			s.a.tab.cancel(m)
		case *pb.LogAck:
			s.a.tab.logAck(m)
		case *pb.TaskFinishedAck:
			s.a.tab.finishedAck(m)
		case *pb.ArtifactAck:
			s.a.tab.artifactAck(m)
		case *pb.ArtifactChunk:
			s.a.tab.restoreChunk(m)
		case *pb.TermInput:
			s.a.tab.termInput(m)
		case *pb.TermResize:
			s.a.tab.termResize(m)
		case *pb.ProxyOpen:
			s.proxyOpen(m)
		case *pb.ProxyData:
			if st := s.proxies.Get(m.GetStream()); st != nil {
				st.Deliver(m.GetOffset(), m.GetData())
			}
		case *pb.ProxyAck:
			if st := s.proxies.Get(m.GetStream()); st != nil {
				st.Ack(m.GetOffset())
			}
		case *pb.ProxyClose:
			if st := s.proxies.Get(m.GetStream()); st != nil {
				st.PeerClosed(m.GetError())
			}
		case *pb.HeartbeatAck:
			s.a.tab.heartbeatAck(s, m)
		case *pb.Goodbye:
			return fmt.Errorf("%w: %s", errRefused, m.GetReason())
		default:
			s.log.Debug().Str("type", codec.TypeOf(m).String()).Msg("ignoring unexpected frame")
		}
	}
}

// heartbeatLoop queues a Heartbeat every interval. A full queue means the
// writer is stuck; the heartbeat is dropped rather than waited for.
func (s *session) heartbeatLoop() {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		hb := s.a.tab.heartbeat(s)
		hb.Gpus = s.gpuSample()
		select {
		case s.ctrl <- hb:
		default:
			s.log.Warn().Msg("outbound queue full; dropping a heartbeat")
			s.heartbeatDropped()
		}
	}
}

// writeLoop writes heartbeats, then run reports and output, every time it
// is woken and at least every logFlushInterval.
func (s *session) writeLoop() {
	t := time.NewTicker(logFlushInterval)
	defer t.Stop()
	w := &frameWriter{bw: bufio.NewWriterSize(s.conn, 256<<10), seal: s.seal}
	for {
		var ctrl []proto.Message
		select {
		case <-s.done:
			return
		case m := <-s.ctrl:
			ctrl = append(ctrl, m)
		case <-s.a.kickc:
		case <-t.C:
		}
		if err := s.flush(w, ctrl); err != nil {
			if !s.closed() {
				s.log.Warn().Err(err).Msg("cannot write to master; closing the connection")
			}
			s.close()
			return
		}
	}
}

// flush writes ctrl and whatever the runs have to send, a few passes at most
// so heartbeats are never starved by a chatty run.
func (s *session) flush(w *frameWriter, ctrl []proto.Message) error {
	_ = s.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	for more := true; more; {
		select {
		case m := <-s.ctrl:
			ctrl = append(ctrl, m)
		default:
			more = false
		}
	}
	for _, m := range ctrl {
		if err := s.write(w, m); err != nil {
			return err
		}
	}
	if err := s.flushProxies(w); err != nil {
		return err
	}
	for range 8 {
		msgs, started := s.a.tab.collect(passBudget)
		for _, m := range msgs {
			if err := s.write(w, m); err != nil {
				return err
			}
			if c, ok := m.(*pb.ArtifactChunk); ok {
				outputs.PutChunkBuf(c.Data) // encoded: the buffer is free again
			}
		}
		if err := w.bw.Flush(); err != nil {
			return err
		}
		s.a.tab.markStarted(s, started)
		if len(msgs) == 0 {
			break
		}
	}
	return nil
}

// write writes m, or drops it when it would be a frame over the protocol's
// limit: one oversized message (a bug in whatever bounded it) costs that
// message, never the connection and every run on it.
func (s *session) write(w *frameWriter, m proto.Message) error {
	err := w.write(m)
	if errors.Is(err, codec.ErrTooLarge) {
		s.log.Warn().Err(err).Msg("a message over the frame limit was dropped; the connection stays")
		return nil
	}
	return err
}

// frameWriter seals frames into a reused buffer. Writer goroutine only: the
// frames reach the socket in the order of their sequence numbers.
type frameWriter struct {
	bw    *bufio.Writer
	seal  *codec.Sealer
	frame []byte
}

func (w *frameWriter) write(m proto.Message) error {
	var err error
	if w.frame, err = w.seal.AppendFrame(w.frame[:0], m); err != nil {
		return err
	}
	_, err = w.bw.Write(w.frame)
	return err
}
