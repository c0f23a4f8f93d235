package logpipe

import "testing"

// TestWriter_SharedDirMoveAndBack: a run's worker writes through master A,
// moves to B (another writer on the same dir), then back to A, whose file
// is still open with the size it left. With SharedDir, A reads the file's
// state again: the file holds every byte once and A acks what it holds.
func TestWriter_SharedDirMoveAndBack(t *testing.T) {
	dir := t.TempDir()
	a, b := newWriter(t, WriterConfig{Dir: dir, SharedDir: true}), newWriter(t, WriterConfig{Dir: dir, SharedDir: true})
	acks := newAcks()
	send := func(w *Writer, off uint64, data string, want Ack) {
		t.Helper()
		n := acks.count()
		submit(t, w, Frame{TaskID: "r1", TraceID: "tr", Attempt: 1, Offset: off, Data: []byte(data), Ack: acks})
		got := acks.waitAck(t, "r1", n)
		want.TaskID, want.Attempt = "r1", 1
		if got != want {
			t.Fatalf("frame (%d,%q): ack %+v, want %+v", off, data, got, want)
		}
	}
	send(a, 0, "one\n", Ack{Offset: 4})
	send(b, 4, "two\n", Ack{Offset: 8})    // moved to B
	send(b, 8, "three\n", Ack{Offset: 14}) // ...
	send(a, 14, "four\n", Ack{Offset: 19}) // and back: A must not trust its 4
	send(a, 10, "ree\nfour\nfive\n", Ack{Offset: 24})
	if got, want := readLog(t, dir, "r1"), "TRACE_ID:tr\none\ntwo\nthree\nfour\nfive\n"; got != want {
		t.Fatalf("file %q, want %q", got, want)
	}
}

// The credit window shares the queue among the connections sending output,
// within one largest frame and the worker's default; a joining connection
// gets the share of every connection.
func TestWriterLogWindow(t *testing.T) {
	w, err := NewWriter(WriterConfig{Dir: t.TempDir(), QueueBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got := w.LogWindow(); got != MaxLogWindow {
		t.Fatalf("no senders: %d", got)
	}
	w.AddSender(32)
	if got := w.LogWindow(); got != 2<<20 {
		t.Fatalf("32 senders: %d", got)
	}
	w.AddSender(10000 - 32)
	if got := w.LogWindow(); got != MinLogWindow {
		t.Fatalf("10000 senders: %d", got)
	}
	w.AddSender(-10000)
	if got := w.HelloWindow(); got != helloWindowMax {
		t.Fatalf("hello window alone: %d", got)
	}
	w.AddConn(256)
	if got, want := w.HelloWindow(), uint32(256<<10); got != want || w.LogWindow() != MaxLogWindow {
		t.Fatalf("256 connections: hello %d, want %d; log %d", got, want, w.LogWindow())
	}
}
