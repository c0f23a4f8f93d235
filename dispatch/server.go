package dispatch

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"sync"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/tunnel"
)

// helloTimeout is how long a connection may take to send its Hello.
const helloTimeout = 10 * time.Second

// server is the RPC server: the gnet engine, its listen address, and the
// connections still waiting for their Hello. It owns them: nothing else
// touches the engine or the pending set. Its gnet callbacks run on event
// loops and must never block: they parse frames, check them and hand them
// to the dispatcher's handlers, on the loop for those that never block
// (LogData, artifact chunks) and on the worker's shard for the rest; they
// never take the registry's mutex. Safe from other goroutines: addr (once
// listen returned), stop, and closeLateHellos (the reaper).
type server struct {
	gnet.BuiltinEventEngine
	d      *Dispatcher
	booted chan struct{} // closed by OnBoot
	runErr chan error    // gnet.Run's end

	eng       gnet.Engine // set by OnBoot, before booted is closed
	boundAddr string      // likewise
	pending   sync.Map    // *conn → struct{}: connections waiting for Hello
}

// conn is the per-connection state kept in gnet's Conn context. Only the
// connection's event loop touches nonce, hello, open and sess (set once
// the Hello's seal is verified); the reaper reads c and opened of
// connections still waiting for their Hello (server.pending).
type conn struct {
	c      gnet.Conn
	nonce  [codec.NonceSize]byte
	hello  bool
	open   *codec.Opener // checks every frame after the Hello
	sess   *session
	opened time.Time
}

func (s *server) OnBoot(eng gnet.Engine) gnet.Action {
	s.eng = eng
	s.boundAddr = s.d.cfg.Addr
	if fd, err := eng.Dup(); err == nil {
		if sa, err := unix.Getsockname(fd); err == nil {
			if in4, ok := sa.(*unix.SockaddrInet4); ok {
				s.boundAddr = (&net.TCPAddr{IP: in4.Addr[:], Port: in4.Port}).String()
			} else if in6, ok := sa.(*unix.SockaddrInet6); ok {
				s.boundAddr = (&net.TCPAddr{IP: in6.Addr[:], Port: in6.Port}).String()
			}
		}
		unix.Close(fd)
	}
	close(s.booted)
	return gnet.None
}

// listen runs the server on Config.Addr with loops event loops and
// returns once it listens, or why it cannot.
func (s *server) listen(ctx context.Context, loops int) error {
	go func() {
		s.runErr <- gnet.Run(s, "tcp://"+s.d.cfg.Addr,
			gnet.WithNumEventLoop(loops), gnet.WithReusePort(false), gnet.WithReuseAddr(true), gnet.WithTCPNoDelay(gnet.TCPNoDelay),
			gnet.WithTCPKeepAlive(time.Minute), gnet.WithLogger(gnetLogger{s.d.log}))
	}()
	select {
	case <-s.booted:
		return nil
	case err := <-s.runErr:
		return fmt.Errorf("cannot start the RPC server on %s: %w", s.d.cfg.Addr, err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// addr is the address the server listens on, once booted.
func (s *server) addr() string { return s.boundAddr }

// stop closes the listener and every connection.
func (s *server) stop(ctx context.Context) error { return s.eng.Stop(ctx) }

// closeLateHellos closes the connections that sent no Hello within
// helloTimeout of opening, as of now. On the reaper.
func (s *server) closeLateHellos(now time.Time) {
	s.pending.Range(func(k, v any) bool {
		if cc := k.(*conn); now.Sub(cc.opened) > helloTimeout {
			s.pending.Delete(k)
			s.d.log.Warn().Str("remote", addrString(cc.c.RemoteAddr())).Msg("closing connection: no Hello within 10 s")
			_ = cc.c.Close()
		}
		return true
	})
}

func (s *server) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	cc := &conn{c: c, opened: s.d.now()}
	_, _ = rand.Read(cc.nonce[:])
	c.SetContext(cc)
	s.pending.Store(cc, struct{}{})
	out, err := codec.AppendFrame(nil, &pb.Challenge{Nonce: cc.nonce[:], MasterId: s.d.cfg.MasterID})
	if err != nil {
		return nil, gnet.Close
	}
	return out, gnet.None
}

func (s *server) OnClose(c gnet.Conn, err error) gnet.Action {
	cc, _ := c.Context().(*conn)
	if cc == nil {
		return gnet.None
	}
	s.pending.Delete(cc)
	if cc.sess == nil {
		return gnet.None
	}
	sess := cc.sess
	sess.closed.Store(true)
	close(sess.quit)
	sess.proxies.CloseAll("the worker's connection closed")
	s.d.logs.AddConn(-1)
	if sess.logSender {
		s.d.logs.AddSender(-1)
	}
	if s.d.outputs != nil {
		if sess.outputSender {
			s.d.outputs.AddSender(-1)
		}
		s.d.outputs.Detach(sess)
	}
	sess.shard.push(func() { s.d.sessionClosed(sess, err) })
	return gnet.None
}

// OnTraffic parses every complete frame in the inbound buffer with
// codec.NextFrom (Peek → Next → Discard): the header's length is checked
// against the limit before the body is waited for, the tag is checked
// before the body is decoded, and the body is decoded (copied out of gnet's
// buffer) before it is discarded. The first frame is the Hello (accept).
func (s *server) OnTraffic(c gnet.Conn) gnet.Action {
	cc, _ := c.Context().(*conn)
	if cc == nil {
		return gnet.Close
	}
	for {
		if !cc.hello {
			joined, act := s.accept(cc)
			if !joined {
				return act
			}
			continue
		}
		msg, err := codec.NextFrom(c, s.d.cfg.MaxFrame, cc.open)
		if err != nil {
			what := "bad frame header"
			switch {
			case errors.Is(err, codec.ErrTag), errors.Is(err, codec.ErrUnsealed):
				what = "frame not authenticated"
			case errors.Is(err, codec.ErrBody):
				what = "bad frame body"
			}
			return s.refuse(cc, what, err)
		}
		if msg == nil {
			return gnet.None // need more bytes
		}
		if act := s.handle(cc, msg); act != gnet.None {
			return act
		}
	}
}

// accept reads a connection's first frame, which must be a Hello sealed
// with the key of the worker id it names (codec.AcceptHello), and starts
// the session. joined is false while the Hello is not all there (act
// None) and when it is refused (act Close).
func (s *server) accept(cc *conn) (joined bool, act gnet.Action) {
	frame, h, err := codec.PeekFrame(cc.c, s.d.cfg.MaxHelloFrame)
	if err != nil {
		if errors.Is(err, codec.ErrTooLarge) {
			err = fmt.Errorf("%w, the limit before a Hello", err)
		}
		return false, s.refuse(cc, "bad frame header", err)
	}
	if frame == nil {
		return false, gnet.None // need more bytes
	}
	if h.Type != codec.TypeHello {
		return false, s.refuse(cc, "protocol error", fmt.Errorf("%s before Hello", h.Type))
	}
	hello, keys, err := codec.AcceptHello(frame, cc.nonce[:], s.d.cfg.MasterID, s.d.workerKey)
	if err != nil {
		what := "worker refused"
		switch {
		case errors.Is(err, codec.ErrBody):
			what = "bad frame body"
		case errors.Is(err, codec.ErrTag):
			err = fmt.Errorf("%w: give the worker this master's join token (WORKER_JOIN_TOKEN) or the key `rlsched worker-key` prints for its id", err)
		}
		return false, s.refuse(cc, what, err)
	}
	if _, err := cc.c.Discard(len(frame)); err != nil {
		return false, s.refuse(cc, "protocol error", fmt.Errorf("cannot discard the Hello: %w", err))
	}
	now := s.d.now()
	cc.hello, cc.open = true, keys.Recv
	s.pending.Delete(cc)
	sess := &session{d: s.d, id: newSessionID(), workerID: hello.WorkerId, instance: hello.Instance,
		remote: addrString(cc.c.RemoteAddr()), c: cc.c, seal: keys.Send, shard: s.d.shardFor(hello.WorkerId), quit: make(chan struct{}),
		proxies: tunnel.NewSet()}
	sess.lastSeen.Store(now.UnixNano())
	for _, g := range hello.Gpus {
		sess.gpuIdx = append(sess.gpuIdx, int(g.Index))
	}
	s.d.checkSkew(sess, hello, now)
	cc.sess = sess
	s.d.logs.AddConn(1) // for its credit window (HelloAck.log_window)
	if act := s.admit(sess, false, func() { s.d.onHello(sess, hello) }); act != gnet.None {
		return false, act
	}
	return true, gnet.None
}

// refuse logs why a connection is closed and tells the peer, best effort.
func (s *server) refuse(cc *conn, what string, err error) gnet.Action {
	ev := s.d.log.Warn().Str("remote", addrString(cc.c.RemoteAddr())).Err(err)
	if cc.sess != nil {
		ev = ev.Str("worker", cc.sess.workerID)
	}
	ev.Msg("closing connection: " + what)
	if out, e := codec.AppendFrame(nil, &pb.Goodbye{Reason: fmt.Sprintf("%s: %v", what, err)}); e == nil {
		_, _ = cc.c.Write(out)
	}
	return gnet.Close
}

// handle acts on one authenticated frame of a joined worker.
func (s *server) handle(cc *conn, msg proto.Message) gnet.Action {
	now := s.d.now()
	sess := cc.sess
	sess.lastSeen.Store(now.UnixNano())
	switch msg := msg.(type) {
	case *pb.Heartbeat:
		if msg.Gpus != nil {
			sess.takeGPUSample(msg.Gpus, now)
		}
		// At most one heartbeat of a session waits on its shard: a newer
		// one replaces it there (its ack covers every earlier seq), so a
		// shard that falls behind does not queue more than one per worker.
		if sess.hb.Swap(msg) == nil {
			sess.shard.pushHeartbeat(sess)
		}
	case *pb.TaskStarted:
		gate := s.d.startPending(sess, msg)
		if act := s.admit(sess, true, func() { s.d.onStarted(sess, msg, gate) }); act != gnet.None {
			s.d.startDone(sess, msg.TaskId, gate)
			return act
		}
	case *pb.LogData:
		s.d.onLogData(sess, msg) // on this loop: it never blocks
	case *pb.TaskFinished:
		return s.admit(sess, true, func() { s.d.onFinished(sess, msg) })
	case *pb.TaskExited:
		// Beside the shard, as the run's other reports: ordered work waits
		// for every earlier report's store write, and while the store is
		// down one retrying TaskFinished held the shard, and with it the
		// worker's heartbeats, past its leases (TestFaultMariaDBDown).
		return s.admit(sess, true, func() { s.d.onExited(sess, msg) })
	case *pb.ArtifactChunk:
		s.d.onArtifactChunk(sess, msg) // on this loop: it never blocks (artifacts.go)
	case *pb.ArtifactAck:
		if !msg.Restore {
			return s.refuse(cc, "protocol error", errors.New("an ArtifactAck from a worker must be a restore request"))
		}
		s.d.restore.onRestoreAck(sess, msg)
	case *pb.Metric:
		s.d.onMetric(sess, msg)
	case *pb.TermData:
		s.d.onTermData(sess, msg) // on this loop: it never blocks (terminal.go)
	case *pb.TermAck:
		s.d.onTermAck(sess, msg)
	case *pb.ProxyData: // the streams never block this loop (proxy.go)
		if st := sess.proxies.Get(msg.Stream); st != nil {
			st.Deliver(msg.Offset, msg.Data)
		}
	case *pb.ProxyAck:
		if st := sess.proxies.Get(msg.Stream); st != nil {
			st.Ack(msg.Offset)
		}
	case *pb.ProxyClose:
		if st := sess.proxies.Get(msg.Stream); st != nil {
			st.PeerClosed(msg.Error)
		}
	default:
		return s.refuse(cc, "protocol error", fmt.Errorf("unexpected %T from a worker", msg))
	}
	return gnet.None
}

// admit queues f, a report of sess's worker, on its shard (async: beside
// it, see shard). When the shard is full it closes the connection instead,
// with a logged reason: the worker resends its unacknowledged reports after
// reconnecting, and the master's memory stays bounded.
func (s *server) admit(sess *session, async bool, f func()) gnet.Action {
	if sess.shard.tryPush(f, async) {
		return gnet.None
	}
	reason := fmt.Sprintf("the master's work queue for this worker is full (%d waiting); reconnect and resend", s.d.cfg.ShardBacklog)
	s.d.log.Warn().Str("worker", sess.workerID).Str("remote", sess.remote).Msg("closing connection: " + reason)
	sess.closeFor(reason)
	return gnet.Close
}

var shardSeed = maphash.MakeSeed()

func (d *Dispatcher) shardFor(workerID string) *shard {
	return d.shards[maphash.String(shardSeed, workerID)%uint64(len(d.shards))]
}

func newSessionID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// gnetLogger routes gnet's own logging into zerolog.
type gnetLogger struct{ l zerolog.Logger }

func (g gnetLogger) Debugf(f string, a ...any) { g.l.Debug().Msgf("gnet: "+f, a...) }
func (g gnetLogger) Infof(f string, a ...any)  { g.l.Debug().Msgf("gnet: "+f, a...) }
func (g gnetLogger) Warnf(f string, a ...any)  { g.l.Warn().Msgf("gnet: "+f, a...) }
func (g gnetLogger) Errorf(f string, a ...any) { g.l.Error().Msgf("gnet: "+f, a...) }
func (g gnetLogger) Fatalf(f string, a ...any) { g.l.Error().Msgf("gnet fatal: "+f, a...) }
