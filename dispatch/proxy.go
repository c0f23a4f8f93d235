package dispatch

import (
	"context"
	"fmt"
	"net"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/tunnel"
)

// The master's side of interactive runs' web apps (issue 34): a stream
// (package tunnel) over the connection of the worker that holds the run,
// to the app on that worker's loopback. httpapi's proxy speaks HTTP over
// it; the frames that come back are taken on the connection's event loop
// (server.go), which a stream never blocks.

// DialSession opens a stream to the web app of interactive run id, placed
// on this master's workers and started: tunnel.ErrNotHere otherwise. It
// waits (within ctx) for the worker to connect to the app, and returns
// the worker's words when it could not. Permission and the run's kind,
// port and status are the caller's to check. Safe from any goroutine.
func (d *Dispatcher) DialSession(ctx context.Context, id string) (net.Conn, error) {
	rr := d.reg.run(id)
	if rr == nil || rr.fence.Load() == 0 {
		return nil, tunnel.ErrNotHere
	}
	sess := d.reg.sessionOf(rr)
	if sess == nil {
		return nil, tunnel.ErrNotHere
	}
	sid := d.proxyIDs.Add(1)
	snd := streamSender{sess: sess, taskID: id}
	st := sess.proxies.Open(sid, snd)
	if st == nil {
		return nil, tunnel.ErrNotHere // the connection closed
	}
	if err := sess.send(&pb.ProxyOpen{TaskId: id, Attempt: int32(rr.attempt), Fence: rr.fence.Load(), Stream: sid}); err != nil {
		st.Fail(err)
		return nil, fmt.Errorf("cannot reach the session's worker: %w", err)
	}
	if err := st.WaitOpen(ctx); err != nil {
		return nil, err
	}
	return st, nil
}

// streamSender sends a stream's frames on its worker's connection (send
// seals and queues; it never waits for the socket).
type streamSender struct {
	sess   *session
	taskID string
}

func (s streamSender) Data(stream, off uint64, data []byte) error {
	return s.sess.send(&pb.ProxyData{TaskId: s.taskID, Stream: stream, Offset: off, Data: data})
}

func (s streamSender) Ack(stream, off uint64) error {
	return s.sess.send(&pb.ProxyAck{TaskId: s.taskID, Stream: stream, Offset: off})
}

func (s streamSender) Close(stream uint64, why string) error {
	return s.sess.send(&pb.ProxyClose{TaskId: s.taskID, Stream: stream, Error: why})
}
