package logpipe

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestAppendExactlyOnce(t *testing.T) {
	dir := t.TempDir()
	fs, err := NewFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	f := func(attempt int, off uint64, data string, wantHave uint64, wantErr error) {
		t.Helper()
		have, _, err := fs.Append("r1", "tr", attempt, off, []byte(data))
		if !errors.Is(err, wantErr) || have != wantHave {
			t.Fatalf("Append(%d,%d,%q) = %d,%v want %d,%v", attempt, off, data, have, err, wantHave, wantErr)
		}
	}
	f(1, 0, "abc", 3, nil)
	f(1, 0, "abc", 3, nil)     // duplicate dropped
	f(1, 1, "bcde", 5, nil)    // overlap: only "de" written
	f(1, 9, "zz", 5, ErrGap)   // future offset refused
	f(2, 0, "xyz\n", 4, nil)   // new attempt: marker after a newline
	f(2, 2, "z\nmore", 8, nil) // overlap
	got, _ := os.ReadFile(filepath.Join(dir, "r1.log"))
	want := "TRACE_ID:tr\nabcde\n=== rlsched attempt 2 ===\nxyz\nmore"
	if string(got) != want {
		t.Fatalf("file %q want %q", got, want)
	}
	if _, _, err := fs.Append("r1", "tr", 1, 0, []byte("late")); err == nil {
		t.Fatal("stale attempt accepted")
	}

	// A restarted master reopens the file and continues at the same offset.
	fs.CloseAll()
	fs2, _ := NewFiles(dir)
	if have, _ := fs2.Have("r1", 2); have != 8 {
		t.Fatalf("recovered have=%d want 8", have)
	}
	if have, fresh, err := fs2.Append("r1", "tr", 2, 4, []byte("more!")); err != nil || have != 9 || string(fresh) != "!" {
		t.Fatalf("after reopen: %d %v", have, err)
	}
}

func TestBadIDNeverTouchesPath(t *testing.T) {
	fs, _ := NewFiles(t.TempDir())
	for _, id := range []string{"../x", "a/b", "", "a\x00b"} {
		if _, _, err := fs.Append(id, "t", 1, 0, []byte("x")); err == nil {
			t.Fatalf("id %q accepted", id)
		}
	}
}

func TestExtractor(t *testing.T) {
	var x Extractor
	pts := x.Feed([]byte("hello\nRLSCHED_METRIC {\"step\": 3, \"episode_reward\": 1"))
	if len(pts) != 0 {
		t.Fatalf("partial line gave %v", pts)
	}
	pts = x.Feed([]byte("2.5, \"loss\": 0.5}\nRLSCHED_METRIC {bad json}\nFINAL_REWARD: 99.5\n"))
	if len(pts) != 2 {
		t.Fatalf("got %v", pts)
	}
	if v, ok := x.FinalReward(); !ok || v != 99.5 {
		t.Fatalf("final %v %v", v, ok)
	}
	var y Extractor
	y.Feed([]byte("RLSCHED_METRIC {\"step\":1,\"episode_reward\":7}\n"))
	if v, ok := y.FinalReward(); !ok || v != 7 {
		t.Fatalf("fallback final %v %v", v, ok)
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
