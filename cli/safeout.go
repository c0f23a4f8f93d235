package cli

import (
	"io"
	"unicode/utf8"
)

// safeWriter is how the CLI prints text it did not write itself (a run's
// name and log, a worker's host, a server's error message) to a terminal: a
// terminal obeys control characters, so a run could clear the screen,
// retitle the window, rewrite lines already printed or, on some terminals,
// make it type. Every C0 control but \n and \t is shown in caret notation
// (ESC as ^[, CR as ^M, DEL as ^?), every C1 control (U+0080–U+009F) as
// M-^X, and bytes that are not UTF-8 as U+FFFD; everything else passes
// unchanged. A UTF-8 sequence split across writes is carried to the next
// one. Not safe for concurrent use (neither is what it wraps).
type safeWriter struct {
	w       io.Writer
	pending []byte // the start of a UTF-8 sequence the last write cut off
	buf     []byte
}

func newSafeWriter(w io.Writer) *safeWriter { return &safeWriter{w: w} }

// clean reports whether p needs no rewriting: printable ASCII, \n and \t.
func clean(p []byte) bool {
	for _, c := range p {
		if c >= 0x7f || (c < 0x20 && c != '\n' && c != '\t') {
			return false
		}
	}
	return true
}

func (s *safeWriter) Write(p []byte) (int, error) {
	if len(s.pending) == 0 && clean(p) {
		_, err := s.w.Write(p)
		if err != nil {
			return 0, err
		}
		return len(p), nil
	}
	data := append(s.pending, p...)
	s.pending = nil
	out := s.buf[:0]
	for i := 0; i < len(data); {
		c := data[i]
		if c < 0x80 {
			out = appendSafeRune(out, rune(c))
			i++
			continue
		}
		if !utf8.FullRune(data[i:]) { // cut off by the end of this write
			s.pending = append(s.pending[:0], data[i:]...)
			break
		}
		r, n := utf8.DecodeRune(data[i:])
		out = appendSafeRune(out, r) // RuneError for a byte that is not UTF-8
		i += n
	}
	s.buf = out
	if _, err := s.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flush ends the stream: a sequence still cut off is shown as U+FFFD.
func (s *safeWriter) flush() {
	if len(s.pending) > 0 {
		s.pending = nil
		_, _ = s.w.Write([]byte(string(utf8.RuneError)))
	}
}

// appendSafeRune appends r, or how it is shown when it is a control.
func appendSafeRune(dst []byte, r rune) []byte {
	switch {
	case r == '\n' || r == '\t':
		return append(dst, byte(r))
	case r < 0x20:
		return append(dst, '^', byte(r)+0x40)
	case r == 0x7f:
		return append(dst, '^', '?')
	case r >= 0x80 && r <= 0x9f:
		return append(dst, 'M', '-', '^', byte(r-0x80)+0x40)
	}
	return utf8.AppendRune(dst, r)
}
