package worker

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
)

// fakeMaster is the master side of the protocol, small enough to read: it
// challenges, checks the Hello's seal (and seals and checks every frame
// after it), acks heartbeats and stores output by offset (dropping
// duplicates, answering "gap" beyond what it has) like the real one.
type fakeMaster struct {
	t     *testing.T
	ln    net.Listener
	token string
	conns chan *masterConn

	mu           sync.Mutex
	ackFn        func(*pb.Hello) *pb.HelloAck
	logs         map[string][]byte    // "task/attempt" → bytes stored
	files        map[string]*fakeFile // "task/attempt/path" → the upload of its newest version
	restores     map[string][]byte    // path → the bytes it serves on a restore request
	maxFiles     int                  // > 0: files of a run past this many are refused, as the master's limit
	refusedFiles int
	gaps         int
	refusals     []time.Time
}

func newFakeMaster(t *testing.T, token string) *fakeMaster {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &fakeMaster{t: t, ln: ln, token: token, conns: make(chan *masterConn, 16), logs: map[string][]byte{}, files: map[string]*fakeFile{}}
	m.ackFn = func(*pb.Hello) *pb.HelloAck {
		return &pb.HelloAck{Session: "s1", HeartbeatIntervalMs: 100, LeaseTtlMs: 30_000, MasterId: "m1"}
	}
	go m.acceptLoop()
	t.Cleanup(func() { ln.Close() })
	return m
}

func (m *fakeMaster) addr() string { return m.ln.Addr().String() }

// setAck replaces how the master answers a Hello.
func (m *fakeMaster) setAck(f func(*pb.Hello) *pb.HelloAck) {
	m.mu.Lock()
	m.ackFn = f
	m.mu.Unlock()
}

func (m *fakeMaster) acceptLoop() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		go m.join(c)
	}
}

func (m *fakeMaster) join(c net.Conn) {
	nonce := make([]byte, 16)
	rand.Read(nonce)
	mc := &masterConn{m: m, c: c, in: make(chan proto.Message, 1<<16)}
	mc.ackHB.Store(true)
	mc.ackLogs.Store(true)
	br := bufio.NewReader(c)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := mc.send(&pb.Challenge{Nonce: nonce, MasterId: "m1"}); err != nil {
		c.Close()
		return
	}
	frame, h, err := codec.ReadRaw(br, codec.DefaultMaxBody, nil)
	if err != nil || h.Type != codec.TypeHello {
		c.Close()
		return
	}
	hello, keys, err := codec.AcceptHello(frame, nonce, "m1", func(id string) ([]byte, error) {
		return codec.WorkerKey([]byte(m.token), id), nil
	})
	if err != nil {
		m.mu.Lock()
		m.refusals = append(m.refusals, time.Now())
		m.mu.Unlock()
		mc.send(&pb.Goodbye{Reason: err.Error()})
		c.Close()
		return
	}
	mc.hello, mc.keys = hello, keys
	m.mu.Lock()
	ack := m.ackFn(hello)
	m.mu.Unlock()
	_ = c.SetDeadline(time.Time{})
	if err := mc.send(ack); err != nil {
		c.Close()
		return
	}
	go mc.readLoop(br)
	m.conns <- mc
}

// next returns the next joined connection.
func (m *fakeMaster) next(t *testing.T) *masterConn {
	t.Helper()
	select {
	case mc := <-m.conns:
		t.Cleanup(func() { mc.c.Close() })
		return mc
	case <-time.After(15 * time.Second):
		t.Fatal("no worker joined within 15s")
		return nil
	}
}

// store keeps ld's new bytes and returns how many bytes the master has.
func (m *fakeMaster) store(ld *pb.LogData) (have uint64, gap bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := fmt.Sprintf("%s/%d", ld.GetTaskId(), ld.GetAttempt())
	b := m.logs[k]
	have = uint64(len(b))
	off, data := ld.GetOffset(), ld.GetData()
	if off > have {
		m.gaps++
		return have, true
	}
	if end := off + uint64(len(data)); end > have {
		m.logs[k] = append(b, data[have-off:]...)
	}
	return uint64(len(m.logs[k])), false
}

// fakeFile is an output file as the fake master got it.
type fakeFile struct {
	size, modNs int64
	data        []byte
	done        bool
	changing    bool
}

// storeChunk keeps c's new bytes, as the real master's receiver does (a new
// version starts over; a gap is answered with what it has), and answers.
func (m *fakeMaster) storeChunk(c *pb.ArtifactChunk) *pb.ArtifactAck {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := fmt.Sprintf("%s/%d/%s", c.GetTaskId(), c.GetAttempt(), c.GetPath())
	f := m.files[k]
	if f == nil && m.maxFiles > 0 && len(m.files) >= m.maxFiles {
		m.refusedFiles++
		return &pb.ArtifactAck{TaskId: c.GetTaskId(), Attempt: c.GetAttempt(), Path: c.GetPath(), Size: c.GetSize(),
			ModifiedUnixNs: c.GetModifiedUnixNs(), Error: "refused: the run keeps at most so many files"}
	}
	if f == nil || f.size != c.GetSize() || f.modNs != c.GetModifiedUnixNs() {
		f = &fakeFile{size: c.GetSize(), modNs: c.GetModifiedUnixNs()}
		m.files[k] = f
	}
	ack := &pb.ArtifactAck{TaskId: c.GetTaskId(), Attempt: c.GetAttempt(), Path: c.GetPath(), Size: c.GetSize(), ModifiedUnixNs: c.GetModifiedUnixNs()}
	have := uint64(len(f.data))
	switch end := c.GetOffset() + uint64(len(c.GetData())); {
	case f.done:
		ack.Offset, ack.Done = have, true
		return ack
	case c.GetOffset() > have:
		ack.Offset, ack.Error = have, "gap"
		return ack
	case end > have:
		f.data = append(f.data, c.GetData()[have-c.GetOffset():]...)
	}
	ack.Offset = uint64(len(f.data))
	if c.GetLast() && ack.Offset == c.GetOffset()+uint64(len(c.GetData())) {
		f.done, f.changing, ack.Done = true, c.GetChanging(), true
	}
	return ack
}

// setRestore makes the fake master serve data as path on restore requests.
func (m *fakeMaster) setRestore(path string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.restores == nil {
		m.restores = map[string][]byte{}
	}
	m.restores[path] = data
}

// serveRestore sends what a restore request asks for beyond what this
// connection sent of the path, as the real master does.
func (mc *masterConn) serveRestore(a *pb.ArtifactAck) {
	mc.m.mu.Lock()
	data, ok := mc.m.restores[a.GetPath()]
	mc.m.mu.Unlock()
	if !ok {
		mc.send(&pb.ArtifactAck{TaskId: a.GetTaskId(), Attempt: a.GetAttempt(), Path: a.GetPath(), Restore: true, Error: "failed: no such file"})
		return
	}
	mc.mu.Lock()
	if mc.restSent == nil {
		mc.restSent = map[string]uint64{}
	}
	from := max(mc.restSent[a.GetPath()], a.GetOffset())
	limit := min(a.GetOffset()+uint64(a.GetWindow()), uint64(len(data)))
	if from >= limit && from > 0 {
		mc.mu.Unlock()
		return
	}
	mc.restSent[a.GetPath()] = limit
	mc.mu.Unlock()
	for off := from; off < limit || (off == 0 && len(data) == 0); {
		end := min(off+1<<20, limit)
		mc.send(&pb.ArtifactChunk{TaskId: a.GetTaskId(), Attempt: a.GetAttempt(), Path: a.GetPath(), Offset: off,
			Data: data[off:end], Last: end == uint64(len(data)), Restore: true})
		if end == uint64(len(data)) {
			break
		}
		off = end
	}
}

// partial is how many bytes of an output file's newest version it has.
func (m *fakeMaster) partial(task string, attempt int32, path string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.files[fmt.Sprintf("%s/%d/%s", task, attempt, path)]; f != nil {
		return len(f.data)
	}
	return 0
}

// file is what the fake master stored of an output file (nil: nothing).
func (m *fakeMaster) file(task string, attempt int32, path string) *fakeFile {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.files[fmt.Sprintf("%s/%d/%s", task, attempt, path)]
	if f == nil || !f.done {
		return nil
	}
	c := *f
	return &c
}

func (m *fakeMaster) log(task string, attempt int32) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return string(m.logs[fmt.Sprintf("%s/%d", task, attempt)])
}

func (m *fakeMaster) gapCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gaps
}

func (m *fakeMaster) refusalTimes() []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]time.Time(nil), m.refusals...)
}

// masterConn is one joined worker connection.
type masterConn struct {
	m     *fakeMaster
	c     net.Conn
	hello *pb.Hello
	keys  codec.Session      // set once the Hello checked out
	in    chan proto.Message // every frame but heartbeats

	ackHB   atomic.Bool  // answer heartbeats
	hbAckAt atomic.Int64 // when the last HeartbeatAck was written, Unix ns
	ackLogs atomic.Bool  // answer LogData
	// refuse, when set, is asked about each LogData first: a non-empty
	// answer refuses the frame (nothing stored) with that LogAck error.
	refuse atomic.Pointer[func(*pb.LogData) string]

	wmu sync.Mutex

	mu      sync.Mutex
	hbCount int
	lastHB  *pb.Heartbeat
	gpus    []*pb.GpuSample // every heartbeat's GPU sample, in order
	lost    []string        // sent in the next HeartbeatAck
	lastAck map[string]uint64
	// holdChunksFrom, when above 0: chunks from that offset on are dropped
	// unanswered.
	holdChunksFrom atomic.Int64
	// restSent: per path, what this connection sent of a restore.
	restSent map[string]uint64
}

// send writes m, sealed once the Hello checked out. Safe from any goroutine.
func (mc *masterConn) send(m proto.Message) error {
	mc.wmu.Lock()
	defer mc.wmu.Unlock()
	var frame []byte
	var err error
	if mc.keys.Send != nil {
		frame, err = mc.keys.Send.AppendFrame(nil, m)
	} else {
		frame, err = codec.AppendFrame(nil, m)
	}
	if err != nil {
		return err
	}
	_, err = mc.c.Write(frame)
	return err
}

func (mc *masterConn) readLoop(br *bufio.Reader) {
	defer close(mc.in)
	for {
		msg, _, err := codec.ReadFrame(br, codec.DefaultMaxBody, nil, mc.keys.Recv)
		if err != nil {
			return
		}
		switch msg := msg.(type) {
		case *pb.Heartbeat:
			mc.mu.Lock()
			mc.hbCount++
			mc.lastHB = msg
			if msg.Gpus != nil {
				mc.gpus = append(mc.gpus, msg.Gpus)
			}
			lost := mc.lost
			if mc.ackHB.Load() {
				mc.lost = nil
			}
			mc.mu.Unlock()
			if mc.ackHB.Load() {
				mc.send(&pb.HeartbeatAck{Seq: msg.GetSeq(), LostTaskIds: lost})
				mc.hbAckAt.Store(time.Now().UnixNano())
			}
			continue
		case *pb.LogData:
			if f := mc.refuse.Load(); f != nil {
				if e := (*f)(msg); e != "" {
					off := uint64(0)
					if e == "busy" {
						off = msg.GetOffset()
					}
					mc.send(&pb.LogAck{TaskId: msg.GetTaskId(), Attempt: msg.GetAttempt(), Offset: off, Error: e})
					break
				}
			}
			have, gap := mc.m.store(msg)
			if mc.ackLogs.Load() {
				mc.ackLog(msg.GetTaskId(), msg.GetAttempt(), have, gap)
			}
		case *pb.ArtifactChunk:
			if h := mc.holdChunksFrom.Load(); h > 0 && msg.GetOffset() >= uint64(h) {
				continue // a congested master: neither stored nor answered
			}
			mc.send(mc.m.storeChunk(msg))
			continue
		case *pb.ArtifactAck:
			if msg.GetRestore() && !msg.GetDone() {
				mc.serveRestore(msg)
			}
			continue
		}
		select {
		case mc.in <- msg:
		default:
			panic("fake master: inbox full")
		}
	}
}

// ackLog sends a LogAck and remembers the offset.
func (mc *masterConn) ackLog(task string, attempt int32, have uint64, gap bool) {
	mc.mu.Lock()
	if mc.lastAck == nil {
		mc.lastAck = map[string]uint64{}
	}
	mc.lastAck[task] = have
	mc.mu.Unlock()
	ack := &pb.LogAck{TaskId: task, Attempt: attempt, Offset: have}
	if gap {
		ack.Error = "gap"
	}
	mc.send(ack)
}

func (mc *masterConn) acked(task string) uint64 {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.lastAck[task]
}

func (mc *masterConn) heartbeats() (int, *pb.Heartbeat) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.hbCount, mc.lastHB
}

// gpuSamples returns the GPU samples of the heartbeats so far.
func (mc *masterConn) gpuSamples() []*pb.GpuSample {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return slices.Clone(mc.gpus)
}

func (mc *masterConn) setLost(ids ...string) {
	mc.mu.Lock()
	mc.lost = ids
	mc.mu.Unlock()
}

// expect returns the first frame (heartbeats aside) that ok accepts,
// skipping the others, or fails the test after d.
func (mc *masterConn) expect(t *testing.T, d time.Duration, what string, ok func(proto.Message) bool) proto.Message {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case m, open := <-mc.in:
			if !open {
				t.Fatalf("connection closed while waiting for %s", what)
			}
			if ok(m) {
				return m
			}
		case <-deadline:
			t.Fatalf("no %s within %s", what, d)
		}
	}
}

// expectNone fails the test if ok accepts any frame within d.
func (mc *masterConn) expectNone(t *testing.T, d time.Duration, what string, ok func(proto.Message) bool) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case m, open := <-mc.in:
			if !open {
				return
			}
			if ok(m) {
				t.Fatalf("unexpected %s: %v", what, m)
			}
		case <-deadline:
			return
		}
	}
}

func (mc *masterConn) started(t *testing.T, task string) *pb.TaskStarted {
	t.Helper()
	return mc.expect(t, 10*time.Second, "TaskStarted of "+task, func(m proto.Message) bool {
		s, ok := m.(*pb.TaskStarted)
		return ok && s.GetTaskId() == task
	}).(*pb.TaskStarted)
}

func (mc *masterConn) finished(t *testing.T, task string, d time.Duration) *pb.TaskFinished {
	t.Helper()
	return mc.expect(t, d, "TaskFinished of "+task, isFinished(task)).(*pb.TaskFinished)
}

func isFinished(task string) func(proto.Message) bool {
	return func(m proto.Message) bool {
		f, ok := m.(*pb.TaskFinished)
		return ok && f.GetTaskId() == task
	}
}
