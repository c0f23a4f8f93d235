package live

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

// A subscriber slower than the live stream while it catches up loses
// nothing: live messages that overflow its pending list are read from the
// file instead, and the history reader waits for room rather than drop.
func TestHub_CatchUpSurvivesPendingOverflow(t *testing.T) {
	h, _ := newTestHub(t, HubConfig{QueueBytes: 2048, HistoryChunk: 256})
	log := newTestLog(t, h, "r1")
	for i := 0; i < 1000; i++ {
		log.write(t, lineText(i))
	}
	s := h.NewSubscriber(testViewer)
	t.Cleanup(s.Close)
	if err := s.Subscribe(LogTopic("r1"), SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	// Not draining yet: the reader is stuck on a full queue while the
	// run goes on.
	for i := 1000; i < 1400; i++ {
		log.write(t, lineText(i))
	}
	f := &follower{t: t, s: s, topic: LogTopic("r1")}
	want := log.bytes()
	if err := f.until(int64(len(want))); err != nil {
		t.Fatal(err)
	}
	// And live after that.
	log.write(t, []byte("tail\n"))
	want = log.bytes()
	if err := f.until(int64(len(want))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.got, want) {
		t.Fatalf("got %d bytes, want %d; first difference at %d", len(f.got), len(want), firstDiff(f.got, want))
	}
	if st := h.Stats(); st.Lagged != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// Bytes that reached the file without being announced (the topic was
// created after them, or a writer skipped them) are read from the file when
// the next announcement shows the hole.
func TestHub_GapFilledFromFile(t *testing.T) {
	h, live := newTestHub(t, HubConfig{})
	log := newTestLog(t, h, "r1")
	s := h.NewSubscriber(testViewer)
	t.Cleanup(s.Close)
	topic := LogTopic("r1")
	if err := s.Subscribe(topic, SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, live, topic)
	log.writeSilently(t, []byte("TRACE_ID:x\nabc"))
	log.write(t, []byte("def\n"))
	f := &follower{t: t, s: s, topic: topic}
	if err := f.until(int64(len(log.bytes()))); err != nil {
		t.Fatal(err)
	}
	if string(f.got) != "TRACE_ID:x\nabcdef\n" {
		t.Fatalf("got %q", f.got)
	}
}

// Bytes announced that the file does not have (a writer that broke the
// contract) are skipped with a lagged frame, never waited for forever.
func TestHub_AnnouncedBytesMissingFromFile(t *testing.T) {
	h, live := newTestHub(t, HubConfig{})
	s := h.NewSubscriber(testViewer)
	t.Cleanup(s.Close)
	topic := LogTopic("r1")
	if err := s.Subscribe(topic, SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, live, topic)
	h.LogAppended("r1", 100, []byte("zzz"))
	f := &follower{t: t, s: s, topic: topic, allowLag: true}
	if err := f.until(103); err != nil {
		t.Fatal(err)
	}
	if string(f.got) != "zzz" || len(f.lagged) != 1 || f.lagged[0] != 100 {
		t.Fatalf("got %q, lagged at %v", f.got, f.lagged)
	}
}

// No message splits a UTF-8 character: a live append that ends inside one
// keeps it back for the next; the end of the run sends what is left.
func TestHub_LiveNeverSplitsCharacters(t *testing.T) {
	h, live := newTestHub(t, HubConfig{})
	s := h.NewSubscriber(testViewer)
	t.Cleanup(s.Close)
	topic := LogTopic("r1")
	if err := s.Subscribe(topic, SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, live, topic)
	s.Drain(nil)
	ri := []byte("日") // e6 97 a5
	h.LogAppended("r1", 0, ri[:1])
	if raw := s.Drain(nil); len(raw) != 0 {
		t.Fatalf("half a character was sent: %q", raw)
	}
	h.LogAppended("r1", 1, append(ri[1:], 'x'))
	fr := expectOne(t, s, "log", topic)
	if *fr.Offset != 0 || *fr.NextOffset != 4 || fr.text(t) != "日x" {
		t.Fatalf("frame: %s", fr.raw)
	}
	h.LogAppended("r1", 4, ri[:2])
	h.TaskChanged(core.Task{ID: "r1", Status: core.StatusRunning})
	h.TaskChanged(core.Task{ID: "r1", Status: core.StatusFailed}) // the run ended mid-character
	fs := next(t, s)
	if len(fs) != 1 {
		fs = append(fs, next(t, s)...)
	}
	var logs []hubFrame
	for _, f := range fs {
		if f.Type == "log" {
			logs = append(logs, f)
		}
	}
	if len(logs) != 1 || *logs[0].Offset != 4 || *logs[0].NextOffset != 6 || logs[0].text(t) != "\ufffd\ufffd" {
		t.Fatalf("flushed: %s", framesString(fs))
	}
}

// History stops before a character the file does not finish yet, unless
// the run has ended; the rest comes once written.
func TestHub_HistoryAndUnfinishedCharacter(t *testing.T) {
	h, live := newTestHub(t, HubConfig{})
	log := newTestLog(t, h, "r1")
	ri := []byte("日")
	log.write(t, append([]byte("ab"), ri[:2]...))

	ended := h.NewSubscriber(testViewer)
	t.Cleanup(ended.Close)
	if err := ended.Subscribe(LogTopic("r1"), SubscribeOptions{RunEnded: true}); err != nil {
		t.Fatal(err)
	}
	fe := &follower{t: t, s: ended, topic: LogTopic("r1")}
	if err := fe.until(4); err != nil {
		t.Fatal(err)
	}
	if string(fe.got) != "ab\ufffd\ufffd" {
		t.Fatalf("ended run: %q", fe.got)
	}
	ended.Close() // its reader has stopped: no more live events from it
	for len(live) > 0 {
		<-live
	}

	s := h.NewSubscriber(testViewer)
	t.Cleanup(s.Close)
	if err := s.Subscribe(LogTopic("r1"), SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, live, LogTopic("r1"))
	f := &follower{t: t, s: s, topic: LogTopic("r1")}
	if err := f.until(2); err != nil {
		t.Fatal(err)
	}
	log.write(t, append(ri[2:], '\n'))
	if err := f.until(6); err != nil {
		t.Fatal(err)
	}
	if string(f.got) != "ab日\n" {
		t.Fatalf("live run: %q", f.got)
	}
}

// An offset past what the file holds waits for the bytes to get there;
// an append that straddles it is cut at the offset.
func TestHub_OffsetAheadOfFile(t *testing.T) {
	h, live := newTestHub(t, HubConfig{})
	log := newTestLog(t, h, "r1")
	log.write(t, []byte("0123"))
	s := h.NewSubscriber(testViewer)
	t.Cleanup(s.Close)
	if err := s.Subscribe(LogTopic("r1"), SubscribeOptions{Offset: 6}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, live, LogTopic("r1"))
	log.write(t, []byte("45"))
	log.write(t, []byte("6789"))
	f := &follower{t: t, s: s, topic: LogTopic("r1"), next: 6}
	if err := f.until(10); err != nil {
		t.Fatal(err)
	}
	if string(f.got) != "6789" {
		t.Fatalf("got %q", f.got)
	}
}

func TestHistoryCut(t *testing.T) {
	ri := "日" // 3 bytes
	f := func(data string, next, limit int64, eof, ended bool, want int) {
		t.Helper()
		if got := historyCut([]byte(data), next, limit, eof, ended); got != want {
			t.Fatalf("historyCut(%q, %d, %d, %v, %v) = %d, want %d", data, next, limit, eof, ended, got, want)
		}
	}
	f("abc", 0, -1, true, false, 3)
	f("abc"+ri[:1], 0, -1, true, false, 3)   // held back at the end of the file
	f("abc"+ri[:2], 0, -1, true, true, 5)    // unless the run ended
	f("abc"+ri[:2], 0, -1, false, true, 3)   // a full chunk: more follows
	f("abc"+ri, 0, -1, false, false, 6)      // complete
	f(ri[:1], 0, -1, true, false, 0)         // nothing whole yet
	f("ab"+ri+"cd", 10, 14, false, false, 5) // the limit falls inside 日: complete it
	f("ab"+ri+"cd", 10, 12, false, false, 2) // at a boundary
	f("ab"+ri+"cd", 10, 16, false, false, 6)
	f("ab"+ri+"cd", 10, 17, false, false, 7)
	f("ab\xe6zzz", 10, 13, false, false, 3) // invalid: no character to complete
	f("abc", 10, 20, true, false, 3)        // the file ends before the limit
	f(strings.Repeat("é", 3), 0, -1, false, false, 6)
}
