package live

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/rlsched/rlsched/core"
)

func TestParseTopic(t *testing.T) {
	f := func(topic string, kind TopicKind, id string) {
		t.Helper()
		k, gotID, err := ParseTopic(topic)
		if err != nil || k != kind || gotID != id {
			t.Fatalf("ParseTopic(%q) = %v %q %v, want %v %q", topic, k, gotID, err, kind, id)
		}
	}
	f("/topic/tasks", TopicKindTasks, "")
	f("/topic/workers", TopicKindWorkers, "")
	f("/topic/logs/r1", TopicKindLogs, "r1")
	f("/topic/logs/"+strings.Repeat("a", 64), TopicKindLogs, strings.Repeat("a", 64))
}

func TestParseTopic_Failure(t *testing.T) {
	f := func(topic string) {
		t.Helper()
		if _, _, err := ParseTopic(topic); !errors.Is(err, ErrBadTopic) {
			t.Fatalf("ParseTopic(%q): want ErrBadTopic, got %v", topic, err)
		}
	}
	f("")
	f("/topic/logs/")
	f("/topic/logs/../etc/passwd")
	f("/topic/logs/a/b")
	f("/topic/logs/a.b")
	f("/topic/logs/a%2Fb")
	f("/topic/logs/a\x00")
	f("/topic/logs/" + strings.Repeat("a", 65))
	f("/topic/tasks/")
	f("/topic/Tasks")
	f("topic/tasks")
	f(strings.Repeat("x", 10000))
}

func TestHub_FanOutSharesEncodedBytes(t *testing.T) {
	h, live := newTestHub(t, HubConfig{})
	var subs []*Subscriber
	for i := 0; i < 3; i++ {
		s := h.NewSubscriber(testViewer)
		t.Cleanup(s.Close)
		if err := s.Subscribe(TopicTasks, SubscribeOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Subscribe(LogTopic("r1"), SubscribeOptions{}); err != nil {
			t.Fatal(err)
		}
		waitLive(t, live, LogTopic("r1"))
		fs := next(t, s)
		if len(fs) != 2 || fs[0].Type != "subscribed" || fs[1].Type != "subscribed" || *fs[1].Offset != 0 {
			t.Fatalf("acks: %s", framesString(fs))
		}
		subs = append(subs, s)
	}
	// Nobody follows r2: nothing is encoded for it.
	h.LogAppended("r2", 0, []byte("nobody\n"))
	if st := h.Stats(); st.Published != 0 || st.Subscribers != 3 || st.Subscriptions != 6 {
		t.Fatalf("stats: %+v", st)
	}

	h.TaskChanged(core.Task{ID: "r1", Name: "n", Status: core.StatusRunning})
	h.LogAppended("r1", 0, []byte("héllo\n"))
	var first [][]byte
	for i, s := range subs {
		raw := s.Drain(nil)
		if len(raw) != 2 {
			t.Fatalf("subscriber %d got %d frames", i, len(raw))
		}
		if i == 0 {
			first = raw
			continue
		}
		for j := range raw {
			if unsafe.SliceData(raw[j]) != unsafe.SliceData(first[j]) {
				t.Fatalf("frame %d of subscriber %d is a copy, not the shared encoding", j, i)
			}
		}
	}
	var task struct {
		Topic string `json:"topic"`
		Type  string `json:"type"`
		Data  map[string]any
	}
	if err := json.Unmarshal(first[0], &task); err != nil {
		t.Fatal(err)
	}
	if task.Topic != TopicTasks || task.Type != "task" || task.Data["id"] != "r1" || task.Data["status"] != "RUNNING" {
		t.Fatalf("task frame: %s", first[0])
	}
	// Arrays are never null, as in the REST API.
	for _, k := range []string{"command", "tags", "gpuIndices"} {
		if _, ok := task.Data[k].([]any); !ok {
			t.Fatalf("task frame: %s is not an array: %s", k, first[0])
		}
	}
	if want := `{"topic":"/topic/logs/r1","type":"log","offset":0,"nextOffset":7,"data":"héllo\n"}`; string(first[1]) != want {
		t.Fatalf("log frame:\n got  %s\n want %s", first[1], want)
	}
	if st := h.Stats(); st.Published != 2 {
		t.Fatalf("stats: %+v", st)
	}

	// Workers only reach their subscribers.
	h.WorkerChanged(core.WorkerInfo{ID: "w1", State: core.WorkerIdle})
	w := h.NewSubscriber(testViewer)
	t.Cleanup(w.Close)
	if err := w.Subscribe(TopicWorkers, SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	expectOne(t, w, "subscribed", TopicWorkers)
	h.WorkerChanged(core.WorkerInfo{ID: "w1", State: core.WorkerRunning})
	f := expectOne(t, w, "worker", TopicWorkers)
	if !bytes.Contains(f.raw, []byte(`"gpus":[]`)) || !bytes.Contains(f.raw, []byte(`"state":"RUNNING"`)) {
		t.Fatalf("worker frame: %s", f.raw)
	}
	for _, s := range subs {
		if raw := s.Drain(nil); len(raw) != 0 {
			t.Fatalf("a tasks subscriber got a worker frame: %q", raw)
		}
	}
}

func TestHub_UnsubscribeAndClose(t *testing.T) {
	h, live := newTestHub(t, HubConfig{MaxSubscriptions: 2})
	s := h.NewSubscriber(testViewer)
	if err := s.Subscribe(TopicTasks, SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Subscribe(LogTopic("r1"), SubscribeOptions{Offset: 5}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, live, LogTopic("r1"))
	if err := s.Subscribe(TopicWorkers, SubscribeOptions{}); !errors.Is(err, ErrTooManySubscriptions) {
		t.Fatalf("third subscription: %v", err)
	}
	// Subscribing again replaces, within the limit.
	if err := s.Subscribe(TopicTasks, SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Subscribe("/topic/nope", SubscribeOptions{}); !errors.Is(err, ErrBadTopic) {
		t.Fatalf("bad topic: %v", err)
	}
	if err := s.Subscribe(LogTopic("r2"), SubscribeOptions{Offset: -1}); !errors.Is(err, ErrBadOffset) {
		t.Fatalf("bad offset: %v", err)
	}
	fs := next(t, s)
	if len(fs) != 3 || *fs[1].Offset != 5 {
		t.Fatalf("acks: %s", framesString(fs))
	}
	if err := s.Unsubscribe(TopicTasks); err != nil {
		t.Fatal(err)
	}
	expectOne(t, s, "unsubscribed", TopicTasks)
	h.TaskChanged(core.Task{ID: "r1"})
	if raw := s.Drain(nil); len(raw) != 0 {
		t.Fatalf("unsubscribed, yet got %q", raw)
	}
	if st := h.Stats(); st.Subscriptions != 1 {
		t.Fatalf("stats: %+v", st)
	}
	s.Close()
	s.Close()
	if st := h.Stats(); st.Subscriptions != 0 || st.Subscribers != 0 {
		t.Fatalf("stats after close: %+v", st)
	}
	for i := range h.shards {
		if n := len(h.shards[i].logs); n != 0 {
			t.Fatalf("shard %d keeps %d topics after the last subscriber left", i, n)
		}
	}
	if err := s.Subscribe(TopicTasks, SubscribeOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("subscribe after close: %v", err)
	}
	if err := s.Send([]byte("{}")); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
	h.LogAppended("r1", 0, []byte("x")) // no subscriber left: nothing happens
}

// A subscriber that does not drain is skipped ahead with a lagged frame;
// the publisher never waits, and the queue stays within its bound.
func TestHub_BoundedQueueLagged(t *testing.T) {
	const bound = 4 << 10
	h, live := newTestHub(t, HubConfig{QueueBytes: bound})
	s := h.NewSubscriber(testViewer)
	t.Cleanup(s.Close)
	topic := LogTopic("r1")
	for _, tp := range []string{TopicTasks, topic} {
		if err := s.Subscribe(tp, SubscribeOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitLive(t, live, topic)
	s.Drain(nil)

	line := []byte(strings.Repeat("x", 999) + "\n")
	var off int64
	for i := 0; i < 50; i++ {
		h.LogAppended("r1", off, line)
		off += int64(len(line))
		h.TaskChanged(core.Task{ID: "r1", Name: strings.Repeat("n", 500)})
	}
	raw := s.Drain(nil)
	total := 0
	for _, b := range raw {
		total += len(b)
	}
	if total > bound+200 {
		t.Fatalf("queued %d bytes over a bound of %d", total, bound)
	}
	f := &follower{t: t, s: s, topic: topic, allowLag: true}
	var tasks, taskLags int
	var logFrames []hubFrame
	for _, b := range raw {
		fr := decodeFrame(t, b)
		switch {
		case fr.Topic == TopicTasks && fr.Type == "task":
			tasks++
		case fr.Topic == TopicTasks && fr.Type == "lagged":
			taskLags++
			if fr.Offset != nil {
				t.Fatalf("a tasks lagged frame has no offset: %s", b)
			}
		default:
			logFrames = append(logFrames, fr)
		}
	}
	f.take(logFrames)
	if tasks == 0 || taskLags != 1 || len(f.lagged) != 1 || f.lagged[0] != off {
		t.Fatalf("tasks %d, task lags %d, log lags %v (want one at %d):\n%s", tasks, taskLags, f.lagged, off, framesString(logFrames))
	}
	if len(f.got) == 0 || len(f.got)%len(line) != 0 {
		t.Fatalf("got %d bytes: want whole lines before the lag", len(f.got))
	}
	st := h.Stats()
	if st.Lagged != 2 || st.Dropped == 0 {
		t.Fatalf("stats: %+v", st)
	}

	// Drained: the stream goes on where the lagged frame said.
	h.LogAppended("r1", off, []byte("after\n"))
	fr := expectOne(t, s, "log", topic)
	if *fr.Offset != off || fr.text(t) != "after\n" {
		t.Fatalf("after lag: %s", fr.raw)
	}

	// A lagged frame owed goes before the next message even without Drain.
	for i := 0; i < 20; i++ {
		h.TaskChanged(core.Task{ID: "r1", Name: strings.Repeat("n", 500)})
	}
	fs := next(t, s)
	last := fs[len(fs)-1]
	if last.Type != "lagged" || last.Topic != TopicTasks {
		t.Fatalf("want a lagged frame last: %s", framesString(fs))
	}
	h.TaskChanged(core.Task{ID: "r1"})
	expectOne(t, s, "task", TopicTasks)
}

func TestHub_SendBound(t *testing.T) {
	h, _ := newTestHub(t, HubConfig{QueueBytes: 100})
	s := h.NewSubscriber(testViewer)
	t.Cleanup(s.Close)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		err = s.Send([]byte(`{"type":"error","error":{"code":"bad_request","message":"x"}}`))
	}
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a peer that never reads must fill its queue: %v", err)
	}
	if err := s.Subscribe(TopicTasks, SubscribeOptions{}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("subscribe on a full queue: %v", err)
	}
	s.Drain(nil)
	if err := s.Subscribe(TopicTasks, SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
}

// lineText is a log line with multi-byte characters, so chunks split them.
func lineText(i int) []byte {
	return fmt.Appendf(nil, "step %06d héllo wörld 日本語 🎉 reward=%d\n", i, i*7)
}

// History from the file, then live appends, every byte once and in order,
// while the log grows concurrently; subscribers join at several moments and
// random offsets, and reconnect (a new Subscriber from their last offset).
func TestHub_ResumeExactlyOnce(t *testing.T) {
	h, _ := newTestHub(t, HubConfig{HistoryChunk: 97, QueueBytes: 64 << 20})
	const id = "r1"
	topic := LogTopic(id)
	log := newTestLog(t, h, id)
	log.write(t, []byte("TRACE_ID:abc\n"))
	for i := 0; i < 200; i++ {
		log.write(t, lineText(i))
	}

	const lines, followers = 3000, 8
	stages := make([]chan struct{}, followers)
	for k := range stages {
		stages[k] = make(chan struct{})
	}
	writerDone := make(chan struct{})
	var end int64 // written before writerDone is closed
	go func() {   // the writer: random chunks that split characters
		defer close(writerDone)
		r := rand.New(rand.NewPCG(1, 2))
		var buf []byte
		for i := 200; i < lines; i++ {
			buf = append(buf, lineText(i)...)
			if k := (i - 200) / 300; (i-200)%300 == 0 && k < followers {
				close(stages[k])
			}
			for len(buf) > 0 && (r.IntN(3) == 0 || i == lines-1) {
				var batch [][]byte
				for k := 1 + r.IntN(6); k > 0 && len(buf) > 0; k-- {
					n := min(len(buf), 1+r.IntN(120))
					batch = append(batch, buf[:n:n])
					buf = buf[n:]
				}
				log.writeBatch(t, batch)
			}
		}
		end = int64(len(log.bytes()))
	}()

	var wg sync.WaitGroup
	r := rand.New(rand.NewPCG(3, 4))
	for k := 0; k < followers; k++ {
		<-stages[k]
		content := log.bytes()
		// A character boundary somewhere in what is written so far.
		start := int64(r.IntN(len(content)))
		for !utf8.RuneStart(content[start]) {
			start--
		}
		reconnectAt := start + int64(r.IntN(20000)) // below what the writer adds after the last stage
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := &follower{t: t, topic: topic, next: start}
			for round := 0; round < 2; round++ {
				f.s = h.NewSubscriber(testViewer)
				if err := f.s.Subscribe(topic, SubscribeOptions{Offset: f.next}); err != nil {
					t.Error(err)
					return
				}
				target := reconnectAt
				if round == 1 {
					<-writerDone
					target = end
				}
				err := f.until(target)
				f.s.Close()
				if err != nil {
					t.Error(err)
					return
				}
			}
			if want := log.bytes()[start:]; !bytes.Equal(f.got, want) {
				t.Errorf("subscriber from %d: got %d bytes, want %d; first difference at %d",
					start, len(f.got), len(want), firstDiff(f.got, want))
			}
		}()
	}
	wg.Wait()
	if st := h.Stats(); st.Lagged != 0 || st.HistoryBytes == 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
