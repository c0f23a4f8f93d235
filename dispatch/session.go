package dispatch

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/dispatch/gpuwatch"
	"github.com/rlsched/rlsched/lease"
	"github.com/rlsched/rlsched/tunnel"
)

// session is a verified worker connection. It is made by the connection's
// event loop when the Hello's seal checks out, and registered by the
// worker's shard (registry.join).
type session struct {
	d        *Dispatcher
	id       string
	workerID string
	instance string // Hello.instance: "" from a worker that sends none
	remote   string // the peer's address, for messages
	c        gnet.Conn
	shard    *shard
	closed   atomic.Bool
	// sendMu orders what send seals and queues: frames reach the worker in
	// the order of their sequence numbers. It guards seal.
	sendMu sync.Mutex
	seal   *codec.Sealer
	// closeReason says why the master closed the connection (closeFor),
	// for the disconnect's log line.
	closeReason atomic.Pointer[string]
	lastSeen    atomic.Int64 // unix nanos (Config.Clock) of the last frame
	// lastHeartbeat: unix nanos (Config.Clock) of the Hello and then of
	// each heartbeat handled, for the worker's view.
	lastHeartbeat atomic.Int64
	fenced        atomic.Int64                 // LogData refused as fenced, to thin out the warnings
	hb            atomic.Pointer[pb.Heartbeat] // the newest heartbeat not yet handled
	// runs is the registry's copy of the runs placed on this worker, by
	// task id, republished (never changed) whenever one is added or
	// removed: the event loop reads it for every LogData and TaskStarted
	// without the registry's mutex (see run).
	runs atomic.Pointer[map[string]*runRec]
	// skewed: the worker's clock differs from the master's by more than
	// maxClockSkew (Hello.sent_unix_ms), so its timestamps are not used.
	// Set by the event loop before the session is shared.
	skewed bool
	// logSender: counted in the log writer's senders (AddSender), which
	// size the credit windows. The connection's event loop only.
	logSender bool
	logFlow   logFlow // logpipe_flow.go
	// outputSender: counted in the artifact receiver's senders (its
	// windows). restores: the run's restore streams on this connection
	// (artifacts.go). The connection's event loop only.
	outputSender bool
	restores     map[string]*restoreStream
	// refusedOutput counts output frames refused, to thin out the warnings.
	refusedOutput atomic.Int64
	// quit is closed when the connection closed (OnClose): goroutines
	// serving it (restore streams) stop.
	quit chan struct{}
	// proxies: the streams to its runs' web apps (proxy.go).
	proxies *tunnel.Set

	// gpuIdx are the indices of the Hello's GPUs, in its order (set before
	// the session is shared); gpuSt is the last GPU sample (gpus.go),
	// guarded by gpuMu and written only by the connection's event loop;
	// idle holds the runs of the worker in an idle stretch, by task id →
	// its start (the shard's).
	gpuIdx []int
	gpuMu  sync.Mutex
	gpuSt  gpuState
	idle   atomic.Pointer[map[string]time.Time]

	// Only on the shard's goroutine (onHello, onHeartbeat):
	touched int64           // unix nanos of the last presence refresh; 0: none
	renew   []lease.Renewal // scratch of onHeartbeat
	ack     pb.HeartbeatAck // scratch of onHeartbeat
	watch   *gpuwatch.Watch // the GPU rules' memory of this session's runs
	gpuSeen uint64          // gpuState.seq of the last sample observed
	gpuOut  gpuwatch.Result // scratch of gpuRules.observe
	// What the worker's view last showed of the GPUs (gpuRules.observe), and
	// the scratch of its samples.
	gpuForeignGen uint64
	gpuHadForeign bool
	gpuProblem    string
	gpuScratch    []gpuwatch.GPU
	useScratch    []runUsage
}

// run returns the run placed on this session's worker under id, or nil.
// Safe from any goroutine; it takes no lock.
func (s *session) run(id string) *runRec {
	if runs := s.runs.Load(); runs != nil {
		return (*runs)[id]
	}
	return nil
}

// closeFor closes the connection for reason, which the disconnect's log
// line names; false when it was closed for a reason already. Safe from any
// goroutine.
func (s *session) closeFor(reason string) bool {
	first := s.closeReason.CompareAndSwap(nil, &reason)
	s.closed.Store(true)
	_ = s.c.Close()
	return first
}

// send seals m and queues it on the connection. Safe from any goroutine.
// Seal and queue happen under sendMu: gnet runs a connection's async writes
// in the order they were queued, so the worker gets the frames in the order
// of their sequence numbers. Each frame is a buffer of its own, which gnet
// keeps until the socket took it.
func (s *session) send(m proto.Message) error {
	if s.closed.Load() {
		return net.ErrClosed
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	buf, err := s.seal.AppendFrame(nil, m)
	if err != nil {
		return err
	}
	return s.c.AsyncWrite(buf, checkOutbound)
}

// ErrSlowConsumer is why the master closes the connection of a worker that
// does not take what the master sends: more than Config.MaxOutbound bytes
// wait for its socket.
var ErrSlowConsumer = errors.New("slow consumer")

// checkOutbound runs on the connection's event loop after each of its
// async writes (a static function: no closure allocated per frame). What
// the socket did not take waits in gnet's outbound buffer; past the limit
// the connection is closed, with a logged reason, rather than buffered
// without end.
func checkOutbound(c gnet.Conn, _ error) error {
	cc, _ := c.Context().(*conn)
	if cc == nil || cc.sess == nil {
		return nil
	}
	s := cc.sess
	if n, limit := c.OutboundBuffered(), s.d.cfg.MaxOutbound; n > limit {
		reason := fmt.Sprintf("%v: %d bytes wait for its socket (limit %d)", ErrSlowConsumer, n, limit)
		if s.closeFor(reason) {
			s.d.log.Warn().Str("worker", s.workerID).Str("remote", s.remote).Msg("closing connection: " + reason)
		}
	}
	return nil
}
