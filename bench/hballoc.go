package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch"
	"github.com/rlsched/rlsched/lease/memory"
	"github.com/rlsched/rlsched/logpipe"
	"github.com/rlsched/rlsched/store/sqlite"
)

// hbProbe drives a dispatch.Dispatcher in this process over loopback with one
// worker connection, to count what the master allocates per heartbeat. The
// client side allocates nothing per heartbeat (the heartbeat is sealed into
// a reused buffer, acks are read into a fixed buffer and their tags checked,
// not decoded), so runtime.MemStats deltas are the master's: event loop,
// shard, handler, lease store and reply.
type hbProbe struct {
	m     *dispatch.Dispatcher
	st    *sqlite.Store
	logs  *logpipe.Writer
	c     net.Conn
	br    *bufio.Reader
	keys  codec.Session
	hb    *pb.Heartbeat
	frame []byte // the heartbeat's frame, sealed anew for each
	buf   []byte
	// gpus are the worker's GPUs; sampled: every heartbeat carries a
	// sample of them (newHBProbe's gpus < 0).
	gpus    int
	sampled bool
}

// newHBProbe starts the master and joins one worker with gpus GPUs (< 0:
// -gpus GPUs, and a GPU sample in every heartbeat); withRun also places one
// run on it, so every heartbeat renews a lease.
func newHBProbe(dir string, withRun bool, gpus int) (*hbProbe, error) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(dir, "rlsched.db"))
	if err != nil {
		return nil, err
	}
	logs, err := logpipe.NewWriter(logpipe.WriterConfig{Dir: filepath.Join(dir, "logs"), Store: st})
	if err != nil {
		st.Close()
		return nil, err
	}
	m, err := dispatch.New(dispatch.Config{Addr: "127.0.0.1:0", MasterID: "probe", JoinToken: []byte(benchJoinToken),
		Logger: zerolog.Nop(), Logs: logs}, st, memory.New())
	if err != nil {
		logs.Close()
		st.Close()
		return nil, err
	}
	if err := m.Start(ctx); err != nil {
		logs.Close()
		st.Close()
		return nil, err
	}
	p := &hbProbe{m: m, st: st, logs: logs, buf: make([]byte, 64<<10), gpus: max(gpus, -gpus), sampled: gpus < 0}
	if err := p.join(withRun); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *hbProbe) join(withRun bool) error {
	c, err := net.Dial("tcp", p.m.Addr())
	if err != nil {
		return err
	}
	p.c = c
	p.br = bufio.NewReaderSize(c, 64<<10)
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	msg, _, err := codec.ReadFrame(p.br, codec.DefaultMaxBody, nil, nil)
	if err != nil {
		return fmt.Errorf("cannot read Challenge: %w", err)
	}
	ch, ok := msg.(*pb.Challenge)
	if !ok {
		return fmt.Errorf("got %T instead of Challenge", msg)
	}
	const id = "probe-worker"
	hello := &pb.Hello{WorkerId: id, Slots: 1, Version: "bench"}
	for i := range p.gpus {
		hello.Gpus = append(hello.Gpus, &pb.GPU{Index: int32(i), Name: "SimGPU", MemoryMb: 81920})
	}
	frame, keys, err := codec.WorkerHello(nil, codec.WorkerKey([]byte(benchJoinToken), id), ch, hello)
	if err != nil {
		return err
	}
	p.keys = keys
	if _, err := p.c.Write(frame); err != nil {
		return err
	}
	if msg, _, err = codec.ReadFrame(p.br, codec.DefaultMaxBody, nil, p.keys.Recv); err != nil {
		return fmt.Errorf("cannot read HelloAck: %w", err)
	}
	if _, ok := msg.(*pb.HelloAck); !ok {
		return fmt.Errorf("got %T instead of HelloAck", msg)
	}
	hb := &pb.Heartbeat{Seq: 1}
	if withRun {
		ref, err := p.placeRun()
		if err != nil {
			return err
		}
		hb.Runs = []*pb.RunRef{ref}
	}
	if p.sampled {
		empty := ""
		hb.Gpus = &pb.GpuSample{UtilPct: make([]uint32, p.gpus), MemoryUsedMb: make([]uint32, p.gpus),
			Foreign: &pb.ForeignList{}, Problem: &empty} // the first of a session: the lists too
	}
	p.hb = hb
	p.frame = make([]byte, 0, 4096)
	return nil
}

// placeRun queues a run, waits for its ExecuteTask and reports it started.
func (p *hbProbe) placeRun() (*pb.RunRef, error) {
	ctx := context.Background()
	uid, err := ensureUser(p.st)
	if err != nil {
		return nil, err
	}
	t := core.Task{UserID: uid, Name: "probe", Command: []string{"/bin/true"}, Attempt: 1,
		Env: map[string]string{}, Tags: []string{}, TraceID: core.NewTraceID()}
	if err := p.st.CreateTask(ctx, &t); err != nil {
		return nil, err
	}
	p.m.Notify()
	for {
		msg, _, err := codec.ReadFrame(p.br, codec.DefaultMaxBody, nil, p.keys.Recv)
		if err != nil {
			return nil, fmt.Errorf("cannot read ExecuteTask: %w", err)
		}
		if ex, ok := msg.(*pb.ExecuteTask); ok {
			ref := &pb.RunRef{TaskId: ex.GetTaskId(), Attempt: ex.GetAttempt(), Fence: ex.GetFence()}
			err := p.write(&pb.TaskStarted{TaskId: ref.TaskId, Attempt: ref.Attempt, Fence: ref.Fence, Pid: 1,
				StartedUnixMs: time.Now().UnixMilli()})
			return ref, err
		}
	}
}

func (p *hbProbe) write(m proto.Message) error {
	b, err := p.keys.Send.AppendFrame(nil, m)
	if err != nil {
		return err
	}
	_, err = p.c.Write(b)
	return err
}

// beat sends n heartbeats and reads every ack. One heartbeat at a time,
// each waiting for its ack: the master coalesces heartbeats that queue up
// behind each other (only the newest is handled and acked), so a batch
// would measure fewer heartbeats than were sent.
func (p *hbProbe) beat(n int) (int, error) {
	_ = p.c.SetDeadline(time.Now().Add(60 * time.Second))
	for sent := range n {
		if g := p.hb.Gpus; g != nil {
			for i := range g.UtilPct {
				g.UtilPct[i], g.MemoryUsedMb[i] = uint32((sent+i*13)%101), uint32(20000+sent%1000+i)
			}
			if sent > 0 {
				g.Foreign, g.Problem = nil, nil // unchanged after the first
			}
		}
		var err error
		if p.frame, err = p.keys.Send.AppendFrame(p.frame[:0], p.hb); err != nil {
			return sent, err
		}
		if _, err := p.c.Write(p.frame); err != nil {
			return sent, err
		}
		if err := p.readAck(); err != nil {
			return sent, err
		}
	}
	return n, nil
}

// readAck reads one frame into the fixed buffer and checks its tag; any
// frame but a HeartbeatAck (a late TaskFinishedAck, say) is skipped.
func (p *hbProbe) readAck() error {
	for {
		frame, h, err := codec.ReadRaw(p.br, len(p.buf), p.buf[:0])
		if err != nil {
			return err
		}
		if !h.Sealed {
			return fmt.Errorf("unsealed %s from the master", h.Type)
		}
		if err := p.keys.Recv.Open(frame); err != nil {
			return err
		}
		if h.Type == codec.TypeHeartbeatAck {
			return nil
		}
	}
}

func (p *hbProbe) close() {
	if p.c != nil {
		p.c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.m.Stop(ctx)
	p.logs.Close()
	p.st.Close()
}

// heartbeatAllocs returns the master's heap allocations (count and bytes)
// per heartbeat over n heartbeats, after a warm-up.
func heartbeatAllocs(dir string, withRun bool, n int) (allocs, bytes float64, err error) {
	p, err := newHBProbe(dir, withRun, 0)
	if err != nil {
		return 0, 0, err
	}
	defer p.close()
	if _, err := p.beat(2000); err != nil {
		return 0, 0, err
	}
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	sent, err := p.beat(n)
	runtime.ReadMemStats(&b)
	if err != nil {
		return 0, 0, err
	}
	return float64(b.Mallocs-a.Mallocs) / float64(sent), float64(b.TotalAlloc-a.TotalAlloc) / float64(sent), nil
}
