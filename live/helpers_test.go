package live

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rlsched/rlsched/core"
)

// testViewer reads every topic in full (an admin sees every run's env).
var testViewer = core.User{ID: 1, Username: "admin", Role: core.RoleAdmin}

// failAfter bounds every wait of these tests; reaching it is a failure, never
// a way to synchronise.
const failAfter = 30 * time.Second

type hubFrame struct {
	Topic      string          `json:"topic"`
	Type       string          `json:"type"`
	Offset     *int64          `json:"offset"`
	NextOffset *int64          `json:"nextOffset"`
	Data       json.RawMessage `json:"data"`
	raw        []byte
}

func (f hubFrame) text(t testing.TB) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(f.Data, &s); err != nil {
		t.Fatalf("log data is not a JSON string: %v: %s", err, f.raw)
	}
	return s
}

func decodeFrame(t testing.TB, b []byte) hubFrame {
	t.Helper()
	var f hubFrame
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("frame is not JSON: %v: %q", err, b)
	}
	f.raw = b
	return f
}

// newTestHub returns a hub over a fresh log dir, and a channel receiving
// the topics of log subscriptions as they go live.
func newTestHub(t testing.TB, cfg HubConfig) (*Hub, chan string) {
	t.Helper()
	if cfg.LogDir == "" {
		cfg.LogDir = t.TempDir()
	}
	h := NewHub(cfg)
	live := make(chan string, 1024)
	h.onLive = func(_ *Subscriber, topic string) {
		select {
		case live <- topic:
		default:
		}
	}
	return h, live
}

func waitLive(t testing.TB, live chan string, topic string) {
	t.Helper()
	timer := time.NewTimer(failAfter)
	defer timer.Stop()
	for {
		select {
		case got := <-live:
			if got == topic {
				return
			}
		case <-timer.C:
			t.Fatalf("%s never went live", topic)
		}
	}
}

// next waits until s has frames and returns them decoded.
func next(t testing.TB, s *Subscriber) []hubFrame {
	t.Helper()
	timer := time.NewTimer(failAfter)
	defer timer.Stop()
	for {
		select {
		case <-s.Ready():
		case <-timer.C:
			t.Fatalf("no frame within %s", failAfter)
		}
		raw := s.Drain(nil)
		if len(raw) == 0 {
			continue
		}
		out := make([]hubFrame, len(raw))
		for i, b := range raw {
			out[i] = decodeFrame(t, b)
		}
		return out
	}
}

// expectType waits for the next frame and checks its type and topic.
func expectOne(t testing.TB, s *Subscriber, typ, topic string) hubFrame {
	t.Helper()
	fs := next(t, s)
	if len(fs) != 1 || fs[0].Type != typ || fs[0].Topic != topic {
		t.Fatalf("want one %s frame of %s, got %d: %s", typ, topic, len(fs), framesString(fs))
	}
	return fs[0]
}

func framesString(fs []hubFrame) string {
	var b bytes.Buffer
	for _, f := range fs {
		b.Write(f.raw)
		b.WriteByte('\n')
	}
	return b.String()
}

// testLog is a run's log file with a writer that announces each append to
// the hub after writing it, as the batch writers do.
type testLog struct {
	hub  *Hub
	id   string
	path string
	f    *os.File

	mu      sync.Mutex
	content []byte
}

func newTestLog(t testing.TB, h *Hub, id string) *testLog {
	t.Helper()
	p := filepath.Join(h.cfg.LogDir, id+".log")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &testLog{hub: h, id: id, path: p, f: f}
}

// write appends p to the file and announces it.
func (l *testLog) write(t testing.TB, p []byte) {
	l.mu.Lock()
	off := int64(len(l.content))
	if _, err := l.f.Write(p); err != nil {
		l.mu.Unlock()
		t.Errorf("write log: %v", err)
		return
	}
	l.content = append(l.content, p...)
	l.mu.Unlock()
	l.hub.LogAppended(l.id, off, p)
}

// writeBatch appends chunks to the file, then announces them one by one,
// as a batch writer that flushes several frames before publishing does:
// a subscriber may read them from the file before they are announced.
func (l *testLog) writeBatch(t testing.TB, chunks [][]byte) {
	l.mu.Lock()
	off := int64(len(l.content))
	for _, p := range chunks {
		if _, err := l.f.Write(p); err != nil {
			l.mu.Unlock()
			t.Errorf("write log: %v", err)
			return
		}
		l.content = append(l.content, p...)
	}
	l.mu.Unlock()
	for _, p := range chunks {
		runtime.Gosched()
		l.hub.LogAppended(l.id, off, p)
		off += int64(len(p))
	}
}

// writeSilently appends p to the file without announcing it.
func (l *testLog) writeSilently(t testing.TB, p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(p); err != nil {
		t.Errorf("write log: %v", err)
	}
	l.content = append(l.content, p...)
}

func (l *testLog) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.content...)
}

// follower reassembles a log subscription, checking that every frame
// continues exactly where the last one ended.
type follower struct {
	t     testing.TB
	s     *Subscriber
	topic string
	next  int64
	got   []byte
	// lagged records the offsets of lagged frames; unless allowLag, one
	// is an error.
	lagged   []int64
	allowLag bool
}

// take applies frames; it reports problems with t.Errorf (goroutine-safe).
func (f *follower) take(frames []hubFrame) {
	for _, fr := range frames {
		switch {
		case fr.Topic != f.topic && fr.Type != "error":
			f.t.Errorf("frame of another topic: %s", fr.raw)
		case fr.Type == "subscribed" || fr.Type == "unsubscribed":
		case fr.Type == "lagged":
			if fr.Offset == nil {
				f.t.Errorf("lagged without offset: %s", fr.raw)
				continue
			}
			f.lagged = append(f.lagged, *fr.Offset)
			if !f.allowLag {
				f.t.Errorf("unexpected lagged: %s", fr.raw)
			}
			f.next = *fr.Offset
		case fr.Type == "log":
			if fr.Offset == nil || fr.NextOffset == nil || *fr.Offset != f.next {
				f.t.Errorf("log frame at %v, want offset %d: %.200s", fr.Offset, f.next, fr.raw)
				continue
			}
			var s string
			if err := json.Unmarshal(fr.Data, &s); err != nil {
				f.t.Errorf("bad data: %v", err)
				continue
			}
			if int64(len(s)) != *fr.NextOffset-*fr.Offset && !strings.ContainsRune(s, utf8.RuneError) {
				f.t.Errorf("data of %d bytes between offsets %d and %d: %q", len(s), *fr.Offset, *fr.NextOffset, s)
			}
			f.got = append(f.got, s...)
			f.next = *fr.NextOffset
		default:
			f.t.Errorf("unexpected frame %s", fr.raw)
		}
	}
}

// until drains until the follower has every byte before end.
func (f *follower) until(end int64) error {
	timer := time.NewTimer(failAfter)
	defer timer.Stop()
	for f.next < end {
		select {
		case <-f.s.Ready():
		case <-timer.C:
			return fmt.Errorf("%s: stuck at offset %d of %d", f.topic, f.next, end)
		}
		raw := f.s.Drain(nil)
		frames := make([]hubFrame, 0, len(raw))
		for _, b := range raw {
			var fr hubFrame
			if err := json.Unmarshal(b, &fr); err != nil {
				return fmt.Errorf("frame is not JSON: %v: %q", err, b)
			}
			fr.raw = b
			frames = append(frames, fr)
		}
		f.take(frames)
	}
	return nil
}
