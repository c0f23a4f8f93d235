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
				Msg("master refused this worker; check the join token and worker id (retrying with backoff)")
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
	ack, helloSent, err := a.handshake(conn, br)
	if err != nil {
		return false, err
	}
	s := newSession(a, conn, addr, ack)
	s.log.Info().Str("master_id", ack.GetMasterId()).Str("session", ack.GetSession()).
		Dur("heartbeat", s.interval).Int64("lease_ttl_ms", ack.GetLeaseTtlMs()).
		Int("killed", len(ack.GetKillTaskIds())).Msg("joined master")
	return true, s.serve(br, ack, helloSent)
}

// handshake answers the master's Challenge with a Hello and reads the
// HelloAck. It returns when the Hello was sent: the lease deadlines count from it.
func (a *agent) handshake(conn net.Conn, br *bufio.Reader) (*pb.HelloAck, sentAt, error) {
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	m, _, err := codec.ReadFrame(br, codec.DefaultMaxBody, nil)
	if err != nil {
		return nil, sentAt{}, fmt.Errorf("cannot read Challenge: %w", err)
	}
	var ch *pb.Challenge
	switch m := m.(type) {
	case *pb.Challenge:
		ch = m
	case *pb.Goodbye:
		return nil, sentAt{}, fmt.Errorf("%w: %s", errRefused, m.GetReason())
	default:
		return nil, sentAt{}, fmt.Errorf("master sent %s before its Challenge", codec.TypeOf(m))
	}

	a.mu.Lock()
	hello := &pb.Hello{
		WorkerId:  a.cfg.ID,
		Proof:     joinProof(a.cfg.JoinToken, ch.GetNonce(), a.cfg.ID),
		Host:      a.cfg.Host,
		Slots:     int32(a.cfg.Slots),
		Version:   core.Version,
		Runs:      a.refsLocked(),
		Isolation: a.iso.helloIsolation(),
		Instance:  a.instance,
	}
	a.mu.Unlock()
	for _, g := range a.cfg.GPUs {
		hello.Gpus = append(hello.Gpus, &pb.GPU{Index: int32(g.Index), Name: g.Name, MemoryMb: g.MemoryMB})
	}
	helloSent := sentNow()
	hello.SentUnixMs = helloSent.at.UnixMilli()
	frame, err := codec.AppendFrame(nil, hello)
	if err != nil {
		return nil, sentAt{}, err
	}
	if _, err := conn.Write(frame); err != nil {
		return nil, sentAt{}, fmt.Errorf("cannot send Hello: %w", err)
	}

	m, _, err = codec.ReadFrame(br, codec.DefaultMaxBody, nil)
	if err != nil {
		return nil, sentAt{}, fmt.Errorf("cannot read HelloAck: %w", err)
	}
	_ = conn.SetDeadline(time.Time{})
	switch m := m.(type) {
	case *pb.HelloAck:
		return m, helloSent, nil
	case *pb.Goodbye:
		return nil, sentAt{}, fmt.Errorf("%w: %s", errRefused, m.GetReason())
	default:
		return nil, sentAt{}, fmt.Errorf("master sent %s instead of HelloAck", codec.TypeOf(m))
	}
}

// joinProof is codec.JoinProof with the token as the agent's config has it.
func joinProof(token string, nonce []byte, workerID string) []byte {
	return codec.JoinProof([]byte(token), nonce, workerID)
}
