package logpipe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTail(t *testing.T) {
	f := func(name, file string, attempt int, want string) {
		t.Helper()
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "r1.log"), []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := Tail(dir, "r1", attempt)
		if err != nil || got != want {
			t.Errorf("%s: Tail = %q, %v; want %q", name, got, err, want)
		}
	}
	f("the header is not output", "TRACE_ID:abc\nTraceback:\nKeyError: 'x'\n", 1, "Traceback:\nKeyError: 'x'")
	f("metric lines left out", "TRACE_ID:abc\nstart\nRLSCHED_METRIC {\"step\":1}\nFINAL_REWARD:3\nboom\n\n", 1, "start\nboom")
	f("the second attempt's only", "TRACE_ID:abc\nfirst fails\n=== rlsched attempt 2 ===\nsecond fails\n", 2, "second fails")
	f("an attempt that wrote nothing", "TRACE_ID:abc\nfirst fails\n=== rlsched attempt 2 ===\n", 2, "")
	f("no such attempt in the file", "TRACE_ID:abc\nfirst\n", 3, "")
	f("attempt 1 ends at the marker", "TRACE_ID:abc\none\n=== rlsched attempt 2 ===\ntwo\n", 1, "one")
	var lines []string
	for i := range 30 {
		lines = append(lines, strings.Repeat("x", i))
	}
	f("at most 20 lines", "TRACE_ID:a\n"+strings.Join(lines, "\n")+"\n", 1, strings.Join(lines[10:], "\n"))
	big := strings.Repeat("é", 3000) // 6000 bytes
	f("one long line: its end, from a rune", "TRACE_ID:a\nbefore\n"+big+"\n", 1, strings.Repeat("é", 2048))
	f("bytes bounded", "TRACE_ID:a\n"+strings.Repeat(strings.Repeat("y", 999)+"\n", 10), 1, strings.TrimSuffix(strings.Repeat(strings.Repeat("y", 999)+"\n", 4), "\n"))
	// A file longer than what Tail reads: the first line of the read is
	// cut, and left out.
	long := "TRACE_ID:a\n" + strings.Repeat("RLSCHED_METRIC {\"step\":1}\n", 4000) + "last words\n"
	f("past the scan", long, 1, "last words")
	f("invalid UTF-8 replaced", "TRACE_ID:a\nbad \xff byte\n", 1, "bad \uFFFD byte")

	got, err := Tail(t.TempDir(), "r9", 1)
	if got != "" || err != nil {
		t.Errorf("no log file: %q, %v", got, err)
	}
}
