package logpipe

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestAppendExactlyOnce: each attempt's output is addressed by offset;
// duplicates and overlaps are dropped, a future offset refused, and a
// restarted writer continues at the offset the file holds.
func TestAppendExactlyOnce(t *testing.T) {
	dir := t.TempDir()
	a := newAcks()
	w := newWriter(t, WriterConfig{Dir: dir})
	f := func(w *Writer, attempt int, off uint64, data string, wantHave uint64, wantErr string) {
		t.Helper()
		n := a.count()
		submit(t, w, Frame{TaskID: "r1", TraceID: "tr", Attempt: attempt, Offset: off, Data: []byte(data), Ack: a})
		if ack := a.waitAck(t, "r1", n); ack.Err != wantErr || ack.Offset != wantHave {
			t.Fatalf("append(%d,%d,%q) = %d,%q want %d,%q", attempt, off, data, ack.Offset, ack.Err, wantHave, wantErr)
		}
	}
	f(w, 1, 0, "abc", 3, "")
	f(w, 1, 0, "abc", 3, "")     // duplicate dropped
	f(w, 1, 1, "bcde", 5, "")    // overlap: only "de" written
	f(w, 1, 9, "zz", 5, AckGap)  // future offset refused
	f(w, 2, 0, "xyz\n", 4, "")   // new attempt: marker after a newline
	f(w, 2, 2, "z\nmore", 8, "") // overlap
	want := "TRACE_ID:tr\nabcde\n=== rlsched attempt 2 ===\nxyz\nmore"
	if got := readLog(t, dir, "r1"); got != want {
		t.Fatalf("file %q want %q", got, want)
	}
	n := a.count()
	submit(t, w, Frame{TaskID: "r1", TraceID: "tr", Attempt: 1, Data: []byte("late"), Ack: a})
	if ack := a.waitAck(t, "r1", n); ack.Err == "" {
		t.Fatal("stale attempt accepted")
	}

	// A restarted master reopens the file and continues at the same offset.
	w.Close()
	w2 := newWriter(t, WriterConfig{Dir: dir})
	f(w2, 2, 4, "more", 8, "") // what the file holds: a duplicate
	f(w2, 2, 4, "more!", 9, "")
	if got := readLog(t, dir, "r1"); got != want+"!" {
		t.Fatalf("after reopen: file %q want %q", got, want+"!")
	}
}

func TestBadIDNeverTouchesPath(t *testing.T) {
	dir := t.TempDir()
	a := newAcks()
	w := newWriter(t, WriterConfig{Dir: filepath.Join(dir, "logs")})
	for _, id := range []string{"../x", "a/b", "", "a\x00b"} {
		n := a.count()
		submit(t, w, Frame{TaskID: id, TraceID: "t", Attempt: 1, Data: []byte("x"), Ack: a})
		if ack := a.waitAck(t, id, n); ack.Err == "" {
			t.Fatalf("id %q accepted", id)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.log")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file outside LOG_DIR: %v", err)
	}
}

// writev writes every slice once, in order, past IOV_MAX slices too, and
// leaves the caller's slices as they were.
func TestRunFileWritev(t *testing.T) {
	dir := t.TempDir()
	set := newFileSet(dir, 4)
	defer set.closeAll()
	rf, err := set.open("r1")
	if err != nil {
		t.Fatal(err)
	}
	var iov [][]byte
	var want []byte
	for i := 0; i < 3000; i++ {
		b := []byte{byte('a' + i%26), byte('0' + i%10)}
		if i%7 == 0 {
			b = nil // empty slices are fine
		}
		iov = append(iov, b)
		want = append(want, b...)
	}
	keep := append([][]byte(nil), iov...)
	if err := rf.writev(iov); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "r1.log"))
	if string(got) != string(want) {
		t.Fatalf("file has %d bytes, want %d", len(got), len(want))
	}
	for i := range iov {
		if len(iov[i]) != len(keep[i]) {
			t.Fatalf("slice %d changed", i)
		}
	}
}

// recover finds every attempt marker at a line start, also one right after
// the TRACE_ID line (an attempt 1 that printed nothing) and one right
// after another marker (issue 11, TestChaosLogAfterSilentAttempt).
func TestRecoverFindsMarkersAtEveryLineStart(t *testing.T) {
	for _, c := range []struct {
		file    string
		attempt int
		have    uint64
	}{
		{"TRACE_ID:tr\nabc", 1, 3},
		{"TRACE_ID:tr\n=== rlsched attempt 2 ===\nab", 2, 2},
		{"TRACE_ID:tr\n=== rlsched attempt 2 ===\n", 2, 0},
		{"TRACE_ID:tr\nx\n=== rlsched attempt 2 ===\n=== rlsched attempt 3 ===\nabcd", 3, 4},
		{"TRACE_ID:tr\n=== rlsched attempt 2 ===\n=== rlsched attempt 3 ===\n", 3, 0},
		{"TRACE_ID:tr\nx=== rlsched attempt 2 ===\n", 1, 27}, // not at a line start: output
	} {
		dir := t.TempDir()
		p, err := Path(dir, "r1")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c.file), 0o644); err != nil {
			t.Fatal(err)
		}
		set := newFileSet(dir, 4)
		rf, err := set.open("r1")
		if err != nil {
			t.Fatal(err)
		}
		if rf.st.attempt != c.attempt || rf.st.have != c.have {
			t.Errorf("%q: recovered attempt %d, %d bytes; want attempt %d, %d bytes", c.file, rf.st.attempt, rf.st.have, c.attempt, c.have)
		}
		set.closeAll()
	}
}
