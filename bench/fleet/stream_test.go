package fleet

import (
	"bytes"
	"fmt"
	"testing"
)

func TestStreamLinesAreFixedAndRebuiltExactly(t *testing.T) {
	s := &stream{tmpl: lineTemplate("lw-000007", "r019a0b1c2d3e4f5a6b7c8d9"),
		batches: []batch{{first: 0, ts: 1111111111111111111}, {first: 3, ts: 2222222222222222222}}, gen: 5}
	out := s.appendLines(nil, 0, 5)
	if len(out) != 5*LineBytes {
		t.Fatalf("5 lines are %d bytes, want %d", len(out), 5*LineBytes)
	}
	lines := bytes.SplitAfter(out, []byte("\n"))
	for k, line := range lines[:5] {
		want := int64(1111111111111111111)
		if k >= 3 {
			want = 2222222222222222222
		}
		if ts, ok := LineTime(line); !ok || ts != want {
			t.Errorf("line %d: time %d %v, want %d", k, ts, ok, want)
		}
		if !bytes.Contains(line, fmt.Appendf(nil, "N%010d ", k)) {
			t.Errorf("line %d lacks its number: %q", k, line)
		}
	}
	// A resend of lines 3..5 is the same bytes as the first send.
	if again := s.appendLines(nil, 3, 5); !bytes.Equal(again, out[3*LineBytes:]) {
		t.Errorf("resent lines differ:\n%q\n%q", again, out[3*LineBytes:])
	}
}
