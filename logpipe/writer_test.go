package logpipe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// acks records the Acks a writer sends, and wakes waiters on each.
type acks struct {
	mu     sync.Mutex
	got    []Ack
	notify chan struct{}
}

func newAcks() *acks { return &acks{notify: make(chan struct{}, 1)} }

func (a *acks) LogAcked(x Ack) {
	a.mu.Lock()
	a.got = append(a.got, x)
	a.mu.Unlock()
	select {
	case a.notify <- struct{}{}:
	default:
	}
}

// last returns the last ack of a task, if any.
func (a *acks) last(task string) (Ack, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(a.got) - 1; i >= 0; i-- {
		if a.got[i].TaskID == task {
			return a.got[i], true
		}
	}
	return Ack{}, false
}

func (a *acks) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.got)
}

// wait returns once cond holds, failing the test after 10 s.
func (a *acks) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-a.notify:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitAck waits for the next ack of task after n acks in all were seen.
func (a *acks) waitAck(t *testing.T, task string, after int) Ack {
	t.Helper()
	var got Ack
	a.wait(t, "an ack of "+task, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, x := range a.got[min(after, len(a.got)):] {
			if x.TaskID == task {
				got = x
				return true
			}
		}
		return false
	})
	return got
}

// recSink keeps what a writer publishes, by run, checking file order.
type recSink struct {
	mu    sync.Mutex
	t     *testing.T
	bytes map[string][]byte
	block chan struct{} // when set, LogAppended waits on it (after signalling in)
	in    chan struct{}
}

func (s *recSink) LogAppended(task string, off int64, data []byte) {
	if s.block != nil {
		s.in <- struct{}{}
		<-s.block
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bytes == nil {
		s.bytes = map[string][]byte{}
	}
	if int64(len(s.bytes[task])) != off {
		s.t.Errorf("sink: %s at offset %d, have %d", task, off, len(s.bytes[task]))
	}
	s.bytes[task] = append(s.bytes[task], data...)
}

func (s *recSink) get(task string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bytes[task])
}

// memStore is a MetricStore in memory.
type memStore struct {
	mu     sync.Mutex
	points map[string][]core.MetricPoint
	fail   error
}

func (m *memStore) AppendMetrics(_ context.Context, id string, pts []core.MetricPoint) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	if m.points == nil {
		m.points = map[string][]core.MetricPoint{}
	}
	// Like the real stores: one value per (run, step, name), the last wins.
next:
	for _, p := range pts {
		for i, q := range m.points[id] {
			if q.Step == p.Step && q.Name == p.Name {
				m.points[id][i] = p
				continue next
			}
		}
		m.points[id] = append(m.points[id], p)
	}
	return nil
}

func newWriter(t *testing.T, cfg WriterConfig) *Writer {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	w, err := NewWriter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

func readLog(t *testing.T, dir, task string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, task+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// submit pushes f, retrying while the writer is busy.
func submit(t *testing.T, w *Writer, f Frame) {
	t.Helper()
	// Every millisecond: a worker backs off that little.
	if !testutil.Poll(10*time.Second, time.Millisecond, func() bool { return w.Submit(f) }) {
		t.Fatalf("writer busy for 10 s")
	}
}

func TestWriter_OffsetsExactlyOnce(t *testing.T) {
	a := newAcks()
	w := newWriter(t, WriterConfig{})
	f := func(attempt int, off uint64, data string, want Ack) {
		t.Helper()
		n := a.count()
		submit(t, w, Frame{TaskID: "r1", TraceID: "tr", Attempt: attempt, Offset: off, Data: []byte(data), Ack: a})
		got := a.waitAck(t, "r1", n)
		want.TaskID, want.Attempt = "r1", attempt
		if got != want {
			t.Fatalf("frame (%d,%d,%q): ack %+v, want %+v", attempt, off, data, got, want)
		}
	}
	f(1, 0, "abc", Ack{Offset: 3})
	f(1, 0, "abc", Ack{Offset: 3})             // duplicate dropped
	f(1, 1, "bcde", Ack{Offset: 5})            // overlap: only "de" written
	f(1, 9, "zz", Ack{Offset: 5, Err: AckGap}) // future offset refused, never padded
	f(2, 0, "xyz\n", Ack{Offset: 4})           // new attempt: marker after a newline
	f(2, 2, "z\nmore", Ack{Offset: 8})         // overlap
	got := readLog(t, w.Dir(), "r1")
	want := "TRACE_ID:tr\nabcde\n=== rlsched attempt 2 ===\nxyz\nmore"
	if got != want {
		t.Fatalf("file %q want %q", got, want)
	}
	if n := a.count(); true {
		submit(t, w, Frame{TaskID: "r1", TraceID: "tr", Attempt: 1, Offset: 0, Data: []byte("late"), Ack: a})
		if ack := a.waitAck(t, "r1", n); !strings.Contains(ack.Err, "stale attempt") {
			t.Fatalf("stale attempt acked %+v", ack)
		}
	}
	st := w.Stats()
	if st["bytes"] != int64(5+8) || st["gaps"] != int64(1) || st["status"] != "ok" || st["lines"] != int64(1) {
		t.Fatalf("stats %v", st)
	}
}

// TestWriter_ManyProducersExact: goroutines stand for event loops, each
// streaming several runs the way workers do (chunks at increasing offsets,
// random resends of old chunks, a window of unacked bytes, resend from the
// acked offset on a gap or busy); every file, and what the sink saw, must be
// byte for byte the runs' output.
// forEachQueue runs f once with each queue a writer can have (queue.go).
func forEachQueue(t *testing.T, f func(t *testing.T, queue string)) {
	for _, q := range []string{"ring", "chan"} {
		t.Run(q, func(t *testing.T) { f(t, q) })
	}
}

func TestWriter_ManyProducersExact(t *testing.T) { forEachQueue(t, testManyProducersExact) }

func testManyProducersExact(t *testing.T, queue string) {
	sink := &recSink{t: t}
	w := newWriter(t, WriterConfig{Sink: sink, Writers: 3, QueueFrames: 64, QueueBytes: 256 << 10, MaxOpenFiles: 6, Queue: queue})
	const producers, runsEach = 6, 4
	outputs := map[string][]byte{}
	for p := range producers {
		for r := range runsEach {
			id := fmt.Sprintf("run-%d-%d", p, r)
			var b bytes.Buffer
			for i := range 3000 + 500*r {
				fmt.Fprintf(&b, "%s line %d\n", id, i)
			}
			outputs[id] = b.Bytes()
		}
	}
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), 1))
			a := newAcks()
			type state struct{ sent, acked uint64 }
			st := map[string]*state{}
			var ids []string
			for r := range runsEach {
				id := fmt.Sprintf("run-%d-%d", p, r)
				ids = append(ids, id)
				st[id] = &state{}
			}
			seen := 0
			// Not a poll: the producer's loop, which wakes on acks
			// (a.notify); the deadline only bounds it.
			deadline := time.Now().Add(30 * time.Second)
			for {
				// Take in acks.
				a.mu.Lock()
				fresh := a.got[seen:]
				seen = len(a.got)
				a.mu.Unlock()
				for _, x := range fresh {
					s := st[x.TaskID]
					switch x.Err {
					case "":
						s.acked = max(s.acked, x.Offset)
						s.sent = max(s.sent, s.acked)
					case AckGap:
						s.acked = max(s.acked, x.Offset)
						s.sent = s.acked
					default:
						t.Errorf("%s: ack %+v", x.TaskID, x)
					}
				}
				done := true
				for _, id := range ids {
					s, out := st[id], outputs[id]
					if s.acked < uint64(len(out)) {
						done = false
					}
					if s.sent >= uint64(len(out)) || s.sent-s.acked > 32<<10 {
						continue
					}
					off := s.sent
					if rng.IntN(10) == 0 && s.acked > 0 { // resend something old
						off = uint64(rng.IntN(int(s.acked)))
					}
					n := min(uint64(1+rng.IntN(4096)), uint64(len(out))-off)
					data := slices.Clone(out[off : off+n])
					if w.Submit(Frame{TaskID: id, TraceID: "trace-" + id, Attempt: 1, Offset: off, Data: data, Ack: a}) {
						s.sent = max(s.sent, off+n)
					}
				}
				if done {
					return
				}
				if time.Now().After(deadline) {
					t.Errorf("producer %d: not done after 30 s", p)
					return
				}
				select { // wait for acks when the windows are full
				case <-a.notify:
				case <-time.After(time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
	w.Close()
	var total int64
	for id, out := range outputs {
		want := "TRACE_ID:trace-" + id + "\n" + string(out)
		if got := readLog(t, w.Dir(), id); got != want {
			t.Fatalf("%s: file of %d bytes, want %d", id, len(got), len(want))
		}
		if got := string(sink.get(id)); got != want {
			t.Fatalf("%s: sink saw %d bytes, want %d", id, len(got), len(want))
		}
		total += int64(len(out))
	}
	st := w.Stats()
	if st["bytes"] != total || st["queue_depth"] != int64(0) || st["queue_bytes"] != int64(0) || st["open_files"] != int64(0) {
		t.Fatalf("stats %v (want %d bytes)", st, total)
	}
}

// TestWriter_FullQueueRefusesWithoutBlocking: while the writer is stuck,
// Submit takes exactly what the ring holds, then refuses at once; the
// refused frames are counted as busy and nothing of them is written.
func TestWriter_FullQueueRefusesWithoutBlocking(t *testing.T) {
	forEachQueue(t, testFullQueueRefusesWithoutBlocking)
}

func testFullQueueRefusesWithoutBlocking(t *testing.T, queue string) {
	sink := &recSink{t: t, block: make(chan struct{}), in: make(chan struct{}, 1)}
	a := newAcks()
	w := newWriter(t, WriterConfig{Sink: sink, Writers: 1, QueueFrames: 4, Queue: queue})
	frame := func(off uint64) Frame {
		return Frame{TaskID: "r", TraceID: "t", Attempt: 1, Offset: off, Data: []byte("0123456789"), Ack: a}
	}
	if !w.Submit(frame(0)) {
		t.Fatal("first frame refused")
	}
	<-sink.in // the writer is inside the sink, its ring empty
	for i := range 4 {
		if !w.Submit(frame(uint64(10 * (i + 1)))) {
			t.Fatalf("frame %d refused with room in the ring", i+1)
		}
	}
	for range 3 {
		if w.Submit(frame(50)) {
			t.Fatal("a full ring took a frame")
		}
	}
	if st := w.Stats(); st["busy"] != int64(3) || st["queue_depth"] != int64(4) || st["queue_bytes"] != int64(40) {
		t.Fatalf("stats of a full ring: %v", st)
	}
	close(sink.block)
	a.wait(t, "all acked", func() bool { x, _ := a.last("r"); return x.Offset == 50 })
	if got := readLog(t, w.Dir(), "r"); got != "TRACE_ID:t\n"+strings.Repeat("0123456789", 5) {
		t.Fatalf("file %q", got)
	}
}

func TestWriter_QueueBytesBound(t *testing.T) {
	sink := &recSink{t: t, block: make(chan struct{}), in: make(chan struct{}, 1)}
	w := newWriter(t, WriterConfig{Sink: sink, Writers: 1, QueueBytes: 100})
	data := func() []byte { return make([]byte, 60) }
	if !w.Submit(Frame{TaskID: "r", Attempt: 1, Data: data()}) {
		t.Fatal("first frame refused")
	}
	<-sink.in
	if !w.Submit(Frame{TaskID: "r", Attempt: 1, Offset: 60, Data: data()}) {
		t.Fatal("a frame into an empty queue must be taken")
	}
	if w.Submit(Frame{TaskID: "r", Attempt: 1, Offset: 120, Data: data()}) {
		t.Fatal("queue bytes bound not enforced")
	}
	close(sink.block)
}

// TestWriter_QueueBytesAcrossWriters: QueueBytes bounds the writers'
// queues together, and one writer's queue may take up to twice its share
// (runs hash to writers unevenly; the windows are shares of the whole).
func TestWriter_QueueBytesAcrossWriters(t *testing.T) {
	const writers = 4
	sink := &recSink{t: t, block: make(chan struct{}), in: make(chan struct{}, writers)}
	w := newWriter(t, WriterConfig{Sink: sink, Writers: writers, QueueBytes: 400})
	// One run per writer, each writer held in the sink by its run's first byte.
	var ids [writers]string
	for i, found := 0, 0; found < writers; i++ {
		id := fmt.Sprintf("r%d", i)
		for k, s := range w.shards {
			if s == w.shardFor(id) && ids[k] == "" {
				ids[k] = id
				found++
			}
		}
	}
	off := map[string]uint64{}
	send := func(id string, n int) bool {
		ok := w.Submit(Frame{TaskID: id, Attempt: 1, Offset: off[id], Data: make([]byte, n)})
		if ok {
			off[id] += uint64(n)
		}
		return ok
	}
	for _, id := range ids {
		if !send(id, 1) {
			t.Fatal("first frame refused")
		}
		<-sink.in
	}
	if !send(ids[0], 150) || !send(ids[0], 40) {
		t.Fatal("a writer's queue must take up to twice its share (200 of 400 bytes for 4 writers)")
	}
	if !send(ids[1], 150) || !send(ids[2], 50) {
		t.Fatal("frames within the bounds refused")
	}
	if send(ids[2], 20) {
		t.Fatal("the bound of all the queues together (400 bytes, 390 queued) not enforced")
	}
	if send(ids[0], 20) {
		t.Fatal("a writer's own bound (200 bytes, 190 queued) not enforced")
	}
	close(sink.block)
}

// TestWriter_DiskFullThenRecovers: a log file that cannot be written (here
// /dev/full, which fails with ENOSPC for root too) acks the frame with the
// error and marks the writer failing; once writable, a resend from the
// acked offset lands exactly. The stats never show the dir's path.
func TestWriter_DiskFullThenRecovers(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	a := newAcks()
	w := newWriter(t, WriterConfig{Writers: 1})
	p := filepath.Join(w.Dir(), "r.log")
	if err := os.Symlink("/dev/full", p); err != nil {
		t.Fatal(err)
	}
	submit(t, w, Frame{TaskID: "r", TraceID: "t", Attempt: 1, Offset: 0, Data: []byte("hello\n"), Ack: a})
	ack := a.waitAck(t, "r", 0)
	if !strings.Contains(ack.Err, "no space") || ack.Offset != 0 {
		t.Fatalf("ack on a full disk: %+v", ack)
	}
	st := w.Stats()
	if st["status"] != "failing" || st["errors"] != int64(1) || !strings.Contains(st["last_error"].(string), "no space") || st["last_error_at"] == "" {
		t.Fatalf("stats on a full disk: %v", st)
	}
	// The health page is public: it says what failed, never where LOG_DIR is.
	for k, v := range st {
		if s, ok := v.(string); ok && strings.Contains(s, w.Dir()) {
			t.Errorf("stats[%q] = %q shows the log dir's path", k, s)
		}
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	n := a.count()
	submit(t, w, Frame{TaskID: "r", TraceID: "t", Attempt: 1, Offset: 0, Data: []byte("hello\nworld\n"), Ack: a})
	if ack := a.waitAck(t, "r", n); ack.Err != "" || ack.Offset != 12 {
		t.Fatalf("ack after recovery: %+v", ack)
	}
	if got := readLog(t, w.Dir(), "r"); got != "TRACE_ID:t\nhello\nworld\n" {
		t.Fatalf("file %q", got)
	}
	if st := w.Stats(); st["status"] != "ok" {
		t.Fatalf("stats after recovery: %v", st)
	}
}

// TestWriter_UnwritableDir: LOG_DIR replaced by a regular file (ENOTDIR,
// also for root): the open fails, the frame is acked with the error.
func TestWriter_UnwritableDir(t *testing.T) {
	a := newAcks()
	dir := filepath.Join(t.TempDir(), "logs")
	w := newWriter(t, WriterConfig{Dir: dir})
	if err := os.Rename(dir, dir+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	submit(t, w, Frame{TaskID: "r", TraceID: "t", Attempt: 1, Data: []byte("x"), Ack: a})
	if ack := a.waitAck(t, "r", 0); !strings.Contains(ack.Err, "not a directory") {
		t.Fatalf("ack with LOG_DIR a file: %+v", ack)
	}
	if st := w.Stats(); st["status"] != "failing" {
		t.Fatalf("stats %v", st)
	}
}

func TestWriter_MetricsAcrossFramesAndRestart(t *testing.T) {
	dir := t.TempDir()
	store := &memStore{}
	a := newAcks()
	w := newWriter(t, WriterConfig{Dir: dir, Store: store})
	var finals []float64 // final rewards reported in acks
	send := func(w *Writer, off uint64, s string) {
		t.Helper()
		n := a.count()
		submit(t, w, Frame{TaskID: "m", TraceID: "t", Attempt: 1, Offset: off, Data: []byte(s), Ack: a})
		ack := a.waitAck(t, "m", n)
		if ack.Err != "" {
			t.Fatalf("ack %+v", ack)
		}
		if ack.FinalReward != nil {
			finals = append(finals, *ack.FinalReward)
		}
	}
	out := "x\nRLSCHED_METRIC {\"step\": 1, \"episode_reward\": 5}\nRLSCHED_METRIC {\"step\": 2, \"loss\": 0.25}\nFINAL_REWARD: 42\n"
	cut1 := strings.Index(out, "reward") // inside the first metric line
	cut2 := strings.Index(out, "\"loss") // inside the second
	send(w, 0, out[:cut1])
	send(w, uint64(cut1), out[cut1:cut2])
	send(w, uint64(cut1), out[cut1:cut2]) // a duplicate extracts nothing
	w.Close()
	// The master died after writing the first metric line but before storing
	// its point: the restarted one extracts it again from the file.
	store.mu.Lock()
	store.points = nil
	store.mu.Unlock()
	// A restarted master continues the line the last one left unfinished.
	w2 := newWriter(t, WriterConfig{Dir: dir, Store: store})
	before := time.Now().UnixMilli()
	send(w2, uint64(cut2), out[cut2:])
	if err := w2.WaitMetrics(t.Context(), "m"); err != nil { // acks come before the store
		t.Fatal(err)
	}
	after := time.Now().UnixMilli()
	store.mu.Lock()
	defer store.mu.Unlock()
	// The line read again from the file has no time (the store keeps the
	// one it was first stored with); the line this frame ends has the
	// master's clock as it read it.
	got := store.points["m"]
	if len(got) == 2 && got[1].Time >= before && got[1].Time <= after {
		got[1].Time = -1
	}
	want := []core.MetricPoint{{Step: 1, Name: "episode_reward", Value: 5}, {Step: 2, Name: "loss", Value: 0.25, Time: -1}}
	if !slices.Equal(got, want) {
		t.Fatalf("points %v want %v (Time -1: within [%d, %d])", store.points["m"], want, before, after)
	}
	// episode_reward stands in for the final reward until FINAL_REWARD.
	if !slices.Equal(finals, []float64{5, 42}) {
		t.Fatalf("final rewards in acks %v, want [5 42]", finals)
	}
}

func TestWriter_MetricStoreErrorsCounted(t *testing.T) {
	store := &memStore{fail: errors.New("db down")}
	a := newAcks()
	w := newWriter(t, WriterConfig{Store: store})
	submit(t, w, Frame{TaskID: "m", Attempt: 1, Data: []byte("RLSCHED_METRIC {\"step\": 1, \"r\": 1}\n"), Ack: a})
	if ack := a.waitAck(t, "m", 0); ack.Err != "" || ack.Offset == 0 {
		t.Fatalf("a metric store error must not refuse the bytes: %+v", ack)
	}
	if err := w.WaitMetrics(t.Context(), "m"); err != nil { // acks come before the store
		t.Fatal(err)
	}
	if st := w.Stats(); st["metric_errors"] != int64(1) {
		t.Fatalf("stats %v", st)
	}
}

// TestWriter_MetricsKeptWhileStoreDown: points the store refused are
// written once it answers again (their bytes are acked, never resent).
func TestWriter_MetricsKeptWhileStoreDown(t *testing.T) {
	store := &memStore{fail: errors.New("db down")}
	a := newAcks()
	w := newWriter(t, WriterConfig{Store: store})
	submit(t, w, Frame{TaskID: "m", Attempt: 1, Data: []byte("RLSCHED_METRIC {\"step\": 1, \"r\": 1}\nRLSCHED_METRIC {\"step\": 2, \"r\": 4}\n"), Ack: a})
	a.waitAck(t, "m", 0)
	if err := w.WaitMetrics(t.Context(), "m"); err != nil { // acks come before the store
		t.Fatal(err)
	}
	if got := w.Stats()["metric_retrying"]; got != 2 {
		t.Fatalf("metric_retrying = %v, want 2", got)
	}
	store.mu.Lock()
	store.fail = nil
	store.mu.Unlock()
	testutil.Eventually(t, 10*time.Second, func() (bool, string) {
		store.mu.Lock()
		n := len(store.points["m"])
		store.mu.Unlock()
		return n == 2 && w.Stats()["metric_retrying"] == 0,
			fmt.Sprintf("points not stored after the store came back: %d, stats %v", n, w.Stats())
	})
}

// TestWriter_RestartAndAttempts: a new writer on the same dir continues
// each run at the offset the files hold, and a new attempt gets its marker.
func TestWriter_RestartAndAttempts(t *testing.T) {
	dir := t.TempDir()
	a := newAcks()
	w := newWriter(t, WriterConfig{Dir: dir, MaxOpenFiles: 1, Writers: 1})
	for i := range 5 { // more runs than open files: the LRU closes and reopens
		for j := range 3 {
			id := fmt.Sprintf("r%d", i)
			submit(t, w, Frame{TaskID: id, TraceID: "t", Attempt: 1, Offset: uint64(j * 2), Data: fmt.Appendf(nil, "%d\n", j), Ack: a})
		}
	}
	a.wait(t, "acks", func() bool { x, _ := a.last("r4"); return x.Offset == 6 })
	if st := w.Stats(); st["open_files"] != int64(1) {
		t.Fatalf("open files %v", st["open_files"])
	}
	w.Close()
	w2 := newWriter(t, WriterConfig{Dir: dir})
	n := a.count()
	submit(t, w2, Frame{TaskID: "r0", Attempt: 1, Offset: 4, Data: []byte("2\n3"), Ack: a})
	// "0\n1\n2\n" held 6 bytes; "2\n3" at 4 adds "3": 7.
	if ack := a.waitAck(t, "r0", n); ack.Offset != 7 || ack.Err != "" {
		t.Fatalf("ack after restart %+v", ack)
	}
	n = a.count()
	submit(t, w2, Frame{TaskID: "r0", Attempt: 2, Offset: 0, Data: []byte("again\n"), Ack: a})
	if ack := a.waitAck(t, "r0", n); ack.Offset != 6 || ack.Attempt != 2 {
		t.Fatalf("ack of attempt 2 %+v", ack)
	}
	w2.Forget("r0")
	w2.Close()
	want := "TRACE_ID:t\n0\n1\n2\n3\n=== rlsched attempt 2 ===\nagain\n"
	if got := readLog(t, dir, "r0"); got != want {
		t.Fatalf("file %q want %q", got, want)
	}
	for i := 1; i < 5; i++ {
		if got := readLog(t, dir, fmt.Sprintf("r%d", i)); got != "TRACE_ID:t\n0\n1\n2\n" {
			t.Fatalf("r%d: %q", i, got)
		}
	}
}

// TestWriter_CloseDrains: Close writes and acks what was queued.
func TestWriter_CloseDrains(t *testing.T) {
	a := newAcks()
	w := newWriter(t, WriterConfig{Writers: 2})
	var want bytes.Buffer
	var off uint64
	for i := range 500 {
		line := fmt.Appendf(nil, "line %d\n", i)
		want.Write(line)
		submit(t, w, Frame{TaskID: "c", TraceID: "t", Attempt: 1, Offset: off, Data: line, Ack: a})
		off += uint64(len(line))
	}
	w.Close()
	if x, _ := a.last("c"); x.Offset != off {
		t.Fatalf("last ack %+v, want offset %d", x, off)
	}
	if got := readLog(t, w.Dir(), "c"); got != "TRACE_ID:t\n"+want.String() {
		t.Fatalf("file of %d bytes", len(got))
	}
	if w.Submit(Frame{TaskID: "c", Attempt: 1, Data: []byte("x")}) {
		t.Fatal("a closed writer took a frame")
	}
}

// BenchmarkWriter moves frames through the whole writer (queue, batch,
// writev, ack), with each queue it can have.
func BenchmarkWriter(b *testing.B) {
	for _, q := range []string{"ring", "chan"} {
		b.Run(q, func(b *testing.B) { benchmarkWriter(b, q) })
	}
}

func benchmarkWriter(b *testing.B, queue string) {
	const runs = 64
	w, err := NewWriter(WriterConfig{Dir: b.TempDir(), Queue: queue})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	chunk := bytes.Repeat([]byte(strings.Repeat("x", 119)+"\n"), 32) // 32 lines of 120 bytes
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = fmt.Sprintf("run%d", i)
	}
	var mu sync.Mutex
	offsets := make([]uint64, runs)
	a := newAcks()
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			// Under the lock, so each run's frames are submitted in order.
			mu.Lock()
			r := rand.IntN(runs)
			f := Frame{TaskID: ids[r], TraceID: "t", Attempt: 1, Offset: offsets[r], Data: chunk, Ack: a}
			for !w.Submit(f) {
				runtime.Gosched() // busy: the writer catches up
			}
			offsets[r] += uint64(len(chunk))
			mu.Unlock()
		}
	})
	w.Close() // drains: every frame written before the clock stops
	b.StopTimer()
	if st := w.Stats(); st["gaps"] != int64(0) {
		b.Fatalf("gaps: %v", st)
	}
}

// TestWriter_RunLogCap: output that would take a run's log past
// MaxRunLogBytes is acked but not stored; the file gets one line saying
// so and nothing after it (a restarted master and later attempts
// included), and a final reward printed past the cap still counts.
func TestWriter_RunLogCap(t *testing.T) {
	dir := t.TempDir()
	sink := &recSink{t: t}
	a := newAcks()
	const max = 40
	w := newWriter(t, WriterConfig{Dir: dir, Sink: sink, MaxRunLogBytes: max})
	header := "TRACE_ID:tr\n"
	var sent uint64
	send := func(w *Writer, attempt int, s string) Ack {
		t.Helper()
		n := a.count()
		submit(t, w, Frame{TaskID: "c", TraceID: "tr", Attempt: attempt, Offset: sent, Data: []byte(s), Ack: a})
		sent += uint64(len(s))
		ack := a.waitAck(t, "c", n)
		if ack.Err != "" || ack.Offset != sent {
			t.Fatalf("ack %+v, want offset %d", ack, sent)
		}
		return ack
	}
	send(w, 1, "0123456789\n")
	send(w, 1, "abcdefghijklmnopqrstuvwxyz\n") // crosses the cap
	if ack := send(w, 1, "FINAL_REWARD: 3\n"); ack.FinalReward == nil || *ack.FinalReward != 3 {
		t.Fatalf("final reward past the cap: %+v", ack)
	}
	kept := (header + "0123456789\nabcdefghijklmnopqrstuvwxyz\n")[:max]
	want := kept + "\n" + capPrefix + "40 bytes (RUN_MAX_LOG_BYTES); the rest of its output is not stored ===\n"
	if got := readLog(t, dir, "c"); got != want {
		t.Fatalf("file %q\nwant %q", got, want)
	}
	if got := string(sink.get("c")); got != want {
		t.Fatalf("published %q\nwant %q", got, want)
	}
	if st := w.Stats(); st["capped_runs"] != int64(1) || st["capped_bytes"] != int64(len(header)+38+16-max) {
		t.Fatalf("stats %v", st)
	}
	// A restarted master knows the file is capped: it takes the worker's
	// offsets as they come and stores nothing, for later attempts too.
	w.Close()
	w2 := newWriter(t, WriterConfig{Dir: dir, MaxRunLogBytes: max})
	send(w2, 1, "more\n")
	sent = 0
	send(w2, 2, "attempt two\n")
	if got := readLog(t, dir, "c"); got != want {
		t.Fatalf("after restart and a new attempt: file %q\nwant %q", got, want)
	}
}

func TestWriter_UnknownQueueRefused(t *testing.T) {
	if _, err := NewWriter(WriterConfig{Dir: t.TempDir(), Queue: "lifo"}); err == nil || !strings.Contains(err.Error(), "ring or chan") {
		t.Fatalf("NewWriter with an unknown queue: %v", err)
	}
}

// TestWriter_ResumeMarksAnAttemptsFirstStep (issue 32): the first metric
// step of each attempt ≥ 2 is stored as a core.MetricResume point valued
// the attempt, found where its output starts even when that first frame
// has no metric line; attempt 1 has none, and a run's own line cannot
// write the series.
func TestWriter_ResumeMarksAnAttemptsFirstStep(t *testing.T) {
	store := &memStore{}
	a := newAcks()
	w := newWriter(t, WriterConfig{Dir: t.TempDir(), Store: store})
	send := func(attempt int, off uint64, s string) {
		t.Helper()
		n := a.count()
		submit(t, w, Frame{TaskID: "r", TraceID: "t", Attempt: attempt, Offset: off, Data: []byte(s), Ack: a})
		if ack := a.waitAck(t, "r", n); ack.Err != "" {
			t.Fatalf("ack %+v", ack)
		}
	}
	send(1, 0, "RLSCHED_METRIC {\"step\": 1, \"r\": 1}\nRLSCHED_METRIC {\"step\": 2, \"r\": 2, \"rlsched/resume\": 9}\n")
	send(2, 0, "loading the checkpoint\nRLSCHED_METRIC {\"step\": 2, \"r\": 2}\nRLSCHED_METRIC {\"step\": 3, \"r\": 3}\n")
	first := "loading the checkpoint\n"
	send(3, 0, first)
	send(3, uint64(len(first)), "RLSCHED_METRIC {\"step\": 3, \"r\": 3}\nRLSCHED_METRIC {\"step\": 4, \"r\": 4}\n")
	if err := w.WaitMetrics(t.Context(), "r"); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	var got []core.MetricPoint
	for _, p := range store.points["r"] {
		if p.Name == core.MetricResume {
			p.Time = 0 // the read's clock: TestWriter_MetricsAcrossFramesAndRestart
			got = append(got, p)
		}
	}
	if want := []core.MetricPoint{{Step: 2, Name: core.MetricResume, Value: 2}, {Step: 3, Name: core.MetricResume, Value: 3}}; !slices.Equal(got, want) {
		t.Fatalf("resume points %v, want %v", got, want)
	}
}
