package live

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rlsched/rlsched/core"
)

func TestAppendJSONString(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		got := string(appendJSONString([]byte("x"), []byte(in)))
		if got != "x"+want {
			t.Fatalf("appendJSONString(%q) = %s, want %s", in, got[1:], want)
		}
	}
	f("", `""`)
	f("plain", `"plain"`)
	f("a\"b\\c", `"a\"b\\c"`)
	f("l1\nl2\r\t", `"l1\nl2\r\t"`)
	f("\x00\x1b[31mred\x7f", `"\u0000\u001b[31mred`+"\x7f"+`"`)
	f("héllo 日本 🎉", `"héllo 日本 🎉"`)
	f("bad\xff\xfeend", `"bad\ufffd\ufffdend"`)
	f("cut\xe6\x97", `"cut\ufffd\ufffd"`)
	f("\u2028\u2029", `"\u2028\u2029"`)
	f("<&>", `"<&>"`)
}

// Whatever the bytes, the frame is JSON that decodes to what encoding/json
// makes of the same bytes.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a\nb", "\xff", "日本\xe6", "\x00\u2028\"\\"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		b := appendLogFrame(nil, "/topic/logs/r1", 7, in)
		var fr struct {
			Offset     int64  `json:"offset"`
			NextOffset int64  `json:"nextOffset"`
			Data       string `json:"data"`
		}
		if err := json.Unmarshal(b, &fr); err != nil {
			t.Fatalf("frame is not JSON: %v: %q", err, b)
		}
		want, _ := json.Marshal(string(in))
		var ws string
		_ = json.Unmarshal(want, &ws)
		if fr.Data != ws || fr.Offset != 7 || fr.NextOffset != 7+int64(len(in)) {
			t.Fatalf("frame %q for %q", b, in)
		}
		if utf8.Valid(in) && fr.Data != string(in) {
			t.Fatalf("valid UTF-8 changed: %q -> %q", in, fr.Data)
		}
	})
}

func TestUTF8Cut(t *testing.T) {
	f := func(in string, want int) {
		t.Helper()
		if got := utf8Cut([]byte(in)); got != want {
			t.Fatalf("utf8Cut(%q) = %d, want %d", in, got, want)
		}
	}
	f("", 0)
	f("abc", 3)
	f("ab\xc3", 2)
	f("ab\xc3\xa9", 4)
	f("\xe6\x97", 0)
	f("a\xf0\x9f\x8e", 1)
	f("a\xf0\x9f\x8e\x89", 5)
	f("a\xff", 2)         // invalid: complete
	f("a\x97\x97\x97", 4) // stray continuation bytes: complete
	f("\xe6\x97\xa5", 3)
}

// The task events are the one task view, encoded.
func TestTaskEventIsTheView(t *testing.T) {
	nan := math.NaN()
	b, err := encodeEvent(TopicTasks, "task", core.Task{ID: "r1", Params: []byte("null"), FinalReward: &nan, Fence: 7}.View())
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"params":{}`, `"finalReward":null`, `"command":[]`, `"env":{}`, `"tags":[]`, `"gpuIndices":[]`} {
		if !strings.Contains(s, want) {
			t.Fatalf("%s lacks %s", s, want)
		}
	}
	if strings.Contains(s, "fence") {
		t.Fatalf("%s shows the fence", s)
	}
}

// The 8-byte fast path escapes exactly what the byte loop escapes, wherever
// the byte that needs escaping falls.
func TestAppendJSONStringFastPath(t *testing.T) {
	slow := func(s []byte) string {
		var b strings.Builder
		b.WriteByte('"')
		for _, r := range string(s) {
			switch {
			case r == '"' || r == '\\':
				b.WriteByte('\\')
				b.WriteRune(r)
			case r == '\n':
				b.WriteString(`\n`)
			case r == '\r':
				b.WriteString(`\r`)
			case r == '\t':
				b.WriteString(`\t`)
			case r < 0x20:
				b.WriteString(`\u00`)
				b.WriteByte(hexDigits[r>>4])
				b.WriteByte(hexDigits[r&0xF])
			case r == utf8.RuneError:
				b.WriteString(`\ufffd`)
			case r == '\u2028' || r == '\u2029':
				b.WriteString(`\u202`)
				b.WriteByte(hexDigits[r&0xF])
			default:
				b.WriteRune(r)
			}
		}
		b.WriteByte('"')
		return b.String()
	}
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 19; pos++ {
			in := bytes.Repeat([]byte("abcdefgh"), 3)[:19]
			in[pos] = byte(c)
			if got, want := string(appendJSONString(nil, in)), slow(in); got != want {
				t.Fatalf("byte 0x%02x at %d: got %s, want %s", c, pos, got, want)
			}
		}
	}
}
