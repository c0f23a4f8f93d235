package live

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"
)

// TestPollFollowsOtherWriters: a log written by another process (another
// master on a shared LOG_DIR) reaches a subscriber through the poller, each
// byte once and in order, also when this process's writer takes over the
// run half-way (its announcements and the poller's overlap).
func TestPollFollowsOtherWriters(t *testing.T) {
	h, live := newTestHub(t, HubConfig{})
	l := newTestLog(t, h, "r1")
	l.writeSilently(t, []byte("TRACE_ID:x\nfirst line\n"))
	s := h.NewSubscriber(testViewer)
	defer s.Close()
	topic := LogTopic("r1")
	if err := s.Subscribe(topic, SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, live, topic)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); h.PollFiles(ctx, 5*time.Millisecond) }()
	defer func() { cancel(); <-done }()

	f := &follower{t: t, s: s, topic: topic}
	for i := range 50 { // another writer: only the file grows
		l.writeSilently(t, fmt.Appendf(nil, "remote %d\n", i))
		if i%10 == 0 {
			if err := f.until(int64(len(l.bytes()))); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 50 { // the run moved here: local announcements
		l.write(t, fmt.Appendf(nil, "local %d\n", i))
	}
	want := l.bytes()
	if err := f.until(int64(len(want))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.got, want) {
		t.Fatalf("got %q\nwant %q", f.got, want)
	}
}
