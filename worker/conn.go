package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/backoff"
)

const (
	dialTimeout      = 5 * time.Second
	handshakeTimeout = 10 * time.Second
	// stableSession: a session that lasted this long resets the backoff.
	stableSession = 5 * time.Second
)

// errRefused wraps a Goodbye from the master.
var errRefused = errors.New("master refused the worker")

// errImpostor: the peer did not answer the Hello with a HelloAck sealed
// under this worker's key, so it may be anyone that can take the master's
// address; the worker obeys nothing it says.
var errImpostor = errors.New("failed to prove it knows this worker's key")

// connectLoop keeps the worker joined until ctx is done: it dials the
// masters in order, failing over to the next on any failure, with backoff
// (100 ms doubling to 5 s, ±20%) between attempts. After a joined session
// ends it retries the same master first, and the backoff starts again from
// its minimum if the session lasted stableSession.
func (a *agent) connectLoop(ctx context.Context) {
	var bo backoff.Backoff
	i := 0
	for ctx.Err() == nil {
		addr := a.cfg.Masters[i%len(a.cfg.Masters)]
		began := time.Now()
		joined, err := a.connect(ctx, addr)
		if ctx.Err() != nil {
			return
		}
		switch {
		case joined:
			if time.Since(began) >= stableSession {
				bo.Reset() // a master that accepts and then drops at once still gets backoff
			}
			a.log.Warn().Err(err).Str("master", addr).Msg("connection to master lost; reconnecting")
		case errors.Is(err, errRefused):
			i++
			a.log.Error().Err(err).Str("master", addr).
				Msg("master refused this worker for the reason in error (retrying with backoff)")
		case errors.Is(err, errImpostor):
			i++
			a.log.Error().Err(err).Str("master", addr).
				Msgf("master at %s failed to prove it knows this worker's key; nothing it sent is obeyed: check that the address is the master's, and that the master has the join token this worker's key derives from (retrying with backoff)", addr)
		default:
			i++
			a.log.Warn().Err(err).Str("master", addr).Msg("cannot join master; trying the next")
		}
		if !backoff.Sleep(ctx, bo.Delay()) {
			return
		}
	}
}

// connect dials addr, joins and serves the session until it ends. joined
// reports whether the master accepted the Hello.
func (a *agent) connect(ctx context.Context, addr string) (joined bool, err error) {
	d := net.Dialer{Timeout: dialTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, fmt.Errorf("cannot dial master %s: %w", addr, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	br := bufio.NewReaderSize(conn, 64<<10)
	ack, keys, helloSent, err := a.handshake(conn, br)
	if err != nil {
		return false, err
	}
	s := newSession(a, conn, addr, ack, keys)
	s.log.Info().Str("master_id", ack.GetMasterId()).Str("session", ack.GetSession()).
		Dur("heartbeat", s.interval).Int64("lease_ttl_ms", ack.GetLeaseTtlMs()).
		Int("killed", len(ack.GetKillTaskIds())).Msg("joined master")
	return true, s.serve(br, ack, helloSent)
}

// localIP is the address of this end of the connection to the master:
// where a multi-node group's other members reach this worker (Hello.addr).
func localIP(conn net.Conn) string {
	if a, ok := conn.LocalAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return ""
}

// handshake answers the master's Challenge with a Hello, sealed as the
// first frame of the session its key and both nonces make, and reads the
// HelloAck, whose tag must prove the master knows the same key before
// anything in it is used. It returns when the Hello was sent: the lease
// deadlines count from it.
func (a *agent) handshake(conn net.Conn, br *bufio.Reader) (*pb.HelloAck, codec.Session, sentAt, error) {
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	m, _, err := codec.ReadFrame(br, codec.DefaultMaxBody, nil, nil)
	if err != nil {
		return nil, codec.Session{}, sentAt{}, fmt.Errorf("cannot read Challenge: %w", err)
	}
	var ch *pb.Challenge
	switch m := m.(type) {
	case *pb.Challenge:
		ch = m
	case *pb.Goodbye:
		return nil, codec.Session{}, sentAt{}, fmt.Errorf("%w: %s", errRefused, m.GetReason())
	default:
		return nil, codec.Session{}, sentAt{}, fmt.Errorf("master sent %s before its Challenge", codec.TypeOf(m))
	}

	hello := &pb.Hello{
		WorkerId:  a.cfg.ID,
		Host:      a.cfg.Host,
		Slots:     int32(a.cfg.Slots),
		Version:   core.Version,
		Runs:      a.tab.refs(),
		Isolation: a.iso.HelloIsolation(),
		Instance:  a.instance,
		CpuMillis: a.offer.cpuMillis,
		MemoryMb:  a.offer.memoryMB,
		Labels:    a.labels,
		Addr:      localIP(conn),
		Runtimes:  a.rt.names(),

		Enforcement:        a.cg.Kind(),
		EnforcementWarning: a.cg.Warning(),
	}
	for _, g := range a.cfg.GPUs {
		hello.Gpus = append(hello.Gpus, &pb.GPU{Index: int32(g.Index), Name: g.Name, MemoryMb: g.MemoryMB, Uuid: g.UUID,
			CpuAffinity: g.CPUAffinity})
	}
	helloSent := sentNow()
	hello.SentUnixMs = helloSent.at.UnixMilli()
	frame, keys, err := codec.WorkerHello(nil, a.workerKey(), ch, hello)
	if err != nil {
		return nil, codec.Session{}, sentAt{}, fmt.Errorf("cannot answer the Challenge: %w", err)
	}
	if _, err := conn.Write(frame); err != nil {
		return nil, codec.Session{}, sentAt{}, fmt.Errorf("cannot send Hello: %w", err)
	}

	m, _, err = codec.ReadFrame(br, codec.DefaultMaxBody, nil, keys.Recv)
	if errors.Is(err, codec.ErrTag) || errors.Is(err, codec.ErrUnsealed) {
		return nil, codec.Session{}, sentAt{}, fmt.Errorf("%w: %v", errImpostor, err)
	}
	if err != nil {
		return nil, codec.Session{}, sentAt{}, fmt.Errorf("cannot read HelloAck: %w", err)
	}
	_ = conn.SetDeadline(time.Time{})
	switch m := m.(type) {
	case *pb.HelloAck:
		return m, keys, helloSent, nil
	case *pb.Goodbye:
		return nil, codec.Session{}, sentAt{}, fmt.Errorf("%w: %s", errRefused, m.GetReason())
	default:
		return nil, codec.Session{}, sentAt{}, fmt.Errorf("master sent %s instead of HelloAck", codec.TypeOf(m))
	}
}

// workerKey is this worker's key: given (Config.Key), or derived from the
// join token for its id.
func (a *agent) workerKey() []byte {
	if a.cfg.Key != nil {
		return a.cfg.Key
	}
	return codec.WorkerKey([]byte(a.cfg.JoinToken), a.cfg.ID)
}
