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
	"github.com/rlsched/rlsched/worker/nvsmi"
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
	kickc     chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	// Guarded by agent.mu.
	seq    uint64
	hbSent map[uint64]sentAt // heartbeat seq → send time, until acked
	// renewed is the send time of the latest renewal (its Hello, then a
	// Heartbeat) this session's master acked: an ExecuteTask read on this
	// connection was claimed no earlier than about then (see leaseLeftLocked).
	renewed sentAt
	// gpuSeq is the Seq of the last GPU sample sent on this session (0:
	// none yet), gpuSent that sample (gpusample.go).
	gpuSeq  uint64
	gpuSent *nvsmi.Sample
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
		kickc:    make(chan struct{}, 1),
		done:     make(chan struct{}),
		hbSent:   map[uint64]sentAt{},
	}
}

// poke wakes the writer. Safe from any goroutine; never blocks.
func (s *session) poke() {
	select {
	case s.kickc <- struct{}{}:
	default:
	}
}

// close ends the session. Safe from any goroutine, any number of times.
func (s *session) close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.conn.Close()
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
	s.a.adopt(s, ack, helloSent)
	var wg sync.WaitGroup
	wg.Go(s.writeLoop)
	wg.Go(s.heartbeatLoop)
	err := s.readLoop(br)
	s.close()
	wg.Wait()
	s.a.detach(s)
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
			s.a.cancel(m)
		case *pb.LogAck:
			s.a.logAck(m)
		case *pb.TaskFinishedAck:
			s.a.finishedAck(m)
		case *pb.ArtifactAck:
			s.a.artifactAck(m) // outputs.go
		case *pb.ArtifactChunk:
			s.a.restoreChunk(m) // restore.go
		case *pb.HeartbeatAck:
			s.a.heartbeatAck(s, m)
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
		hb := s.a.heartbeat(s)
		select {
		case s.ctrl <- hb:
		default:
			s.log.Warn().Msg("outbound queue full; dropping a heartbeat")
			s.a.mu.Lock()
			s.a.heartbeatDroppedLocked(s)
			s.a.mu.Unlock()
		}
	}
}

// heartbeat builds the next Heartbeat and remembers its send time.
func (a *agent) heartbeat(s *session) *pb.Heartbeat {
	a.mu.Lock()
	defer a.mu.Unlock()
	s.seq++
	now := sentNow()
	s.hbSent[s.seq] = now
	if s.seq > 1024 {
		delete(s.hbSent, s.seq-1024) // never acked: stop remembering it
	}
	return &pb.Heartbeat{Seq: s.seq, Runs: a.refsLocked(), SentUnixMs: now.at.UnixMilli(), Gpus: a.gpuSampleLocked(s)}
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
		case <-s.kickc:
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
		if err := w.write(m); err != nil {
			return err
		}
	}
	for range 8 {
		msgs, started := s.a.collect(passBudget)
		for _, m := range msgs {
			if err := w.write(m); err != nil {
				return err
			}
			if c, ok := m.(*pb.ArtifactChunk); ok {
				putChunkBuf(c.Data) // encoded: the buffer is free again
			}
		}
		if err := w.bw.Flush(); err != nil {
			return err
		}
		s.a.markStarted(started)
		if len(msgs) == 0 {
			break
		}
	}
	return nil
}

// collect gathers, from every run, its TaskStarted if not yet written, its
// output from the send offset (while the connection's logWindow has room and
// the run is not paused by a refusal), then every run's outputs (restore
// requests, TensorBoard points, file chunks: collectOutputsLocked), and its
// TaskFinished once every byte is acked and its last sync of outputs is
// over.
func (a *agent) collect(budget int) (msgs []proto.Message, started []*run) {
	a.mu.Lock()
	defer a.mu.Unlock()
	inflight := 0
	for _, r := range a.runs {
		acked := r.out.Acked()
		r.sent = max(r.sent, acked)
		inflight += int(r.sent - acked)
	}
	window := a.logWindow
	if window <= 0 {
		window = logWindow
	}
	now := time.Now()
	used := 0
	for _, r := range a.runs {
		if r.startedMsg != nil {
			msgs = append(msgs, r.startedMsg)
			started = append(started, r)
		}
		for used < budget && inflight < window && !now.Before(r.retryAt) {
			if r.sent >= r.out.End() {
				break
			}
			data := r.out.ReadAt(r.sent, min(logChunk, window-inflight))
			if len(data) == 0 {
				break
			}
			msgs = append(msgs, &pb.LogData{TaskId: r.id, Attempt: r.attempt, Fence: r.fence, Offset: r.sent, Data: data})
			r.sent += uint64(len(data))
			used += len(data)
			inflight += len(data)
		}
	}
	// Outputs after every run's logs, in a window of their own (outputs.go).
	msgs = a.collectOutputsLocked(msgs)
	for _, r := range a.runs {
		if r.fin != nil && !r.finSent && r.out.Done() && r.outs.doneLocked() {
			msgs = append(msgs, r.fin)
			r.finSent = true
		}
	}
	return msgs, started
}

// markStarted notes that the TaskStarted of each run reached the socket.
func (a *agent) markStarted(started []*run) {
	if len(started) == 0 {
		return
	}
	a.mu.Lock()
	for _, r := range started {
		r.startedMsg = nil
	}
	a.mu.Unlock()
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
