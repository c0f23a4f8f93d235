package logpipe

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The tail of a run's log, for the record of a failed run
// (core.Task.ErrorTail): its last lines, as its log file holds them once
// the run's TaskFinished came (every byte of output is acked by then, and
// acked bytes are in the file). Metric lines (RLSCHED_METRIC, FINAL_REWARD)
// are left out: they are most of a training log and never say why it
// failed.

// Bounds of an error tail.
const (
	TailLines = 20
	TailBytes = 4096
	// tailScan is how much of the file's end is read to find them: metric
	// lines in between are skipped, so more than TailBytes.
	tailScan = 64 << 10
)

// Tail returns the last lines (at most TailLines, TailBytes in all) of
// attempt's output in the log of run taskID under dir, metric lines left
// out; "" when the file or the attempt's output is not there.
func Tail(dir, taskID string, attempt int) (string, error) {
	path, err := Path(dir, taskID)
	if err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	from := max(0, fi.Size()-tailScan)
	b := make([]byte, fi.Size()-from)
	if _, err := f.ReadAt(b, from); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return tailOf(b, from == 0, attempt), nil
}

// tailOf is Tail of the end b of a log file (its start when whole).
func tailOf(b []byte, whole bool, attempt int) string {
	// Only this attempt's output: after its marker, or after the header
	// for the first one.
	if attempt > 1 {
		mk := []byte(markerPrefix + strconv.Itoa(attempt) + " ===\n")
		i := bytes.LastIndex(b, mk)
		switch {
		case i >= 0 && (i == 0 || b[i-1] == '\n'):
			b, whole = b[i+len(mk):], true
		case whole:
			return "" // the attempt wrote nothing
		}
	} else if whole {
		if i := bytes.IndexByte(b, '\n'); i >= 0 && bytes.HasPrefix(b, []byte("TRACE_ID:")) {
			b = b[i+1:]
		}
		if i := bytes.Index(b, []byte("\n"+markerPrefix)); i >= 0 {
			b = b[:i+1] // a later attempt's marker: attempt 1 ended there
		}
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if !whole && len(lines) > 0 {
		lines = lines[1:] // cut by the read: not a whole line
	}
	var keep []string
	size := 0
	for i := len(lines) - 1; i >= 0 && len(keep) < TailLines; i-- {
		l := strings.ToValidUTF8(strings.TrimRight(lines[i], "\r"), "\uFFFD")
		if strings.HasPrefix(l, "RLSCHED_METRIC ") || strings.HasPrefix(l, "FINAL_REWARD:") {
			continue
		}
		if len(keep) == 0 && strings.TrimSpace(l) == "" {
			continue // trailing blank lines
		}
		if size+len(l)+1 > TailBytes {
			if len(keep) == 0 { // one line longer than the bound: its end
				keep = append(keep, validTail(l, TailBytes))
			}
			break
		}
		size += len(l) + 1
		keep = append(keep, l)
	}
	for i, j := 0, len(keep)-1; i < j; i, j = i+1, j-1 {
		keep[i], keep[j] = keep[j], keep[i]
	}
	return strings.Join(keep, "\n")
}

// validTail is the last at most n bytes of s, starting at a rune.
func validTail(s string, n int) string {
	s = s[len(s)-n:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}
