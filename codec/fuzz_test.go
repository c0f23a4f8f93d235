package codec

import (
	"bufio"
	"bytes"
	"io"
	"testing"
)

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }

// FuzzDecoder feeds arbitrary bytes split at an arbitrary point (the way a
// TCP read splits a frame) and checks that decoding never panics, never
// returns a message after an error, and decodes the same whether fed whole
// or in two pieces.
func FuzzDecoder(f *testing.F) {
	for _, m := range sample() {
		fr, _ := AppendFrame(nil, m)
		f.Add(fr, uint16(3))
		f.Add(fr[:len(fr)-1], uint16(5))
		bad := bytes.Clone(fr)
		bad[len(bad)-1] ^= 0xFF
		f.Add(bad, uint16(9))
	}
	f.Add([]byte{0x52, 0x4C, 1, 2, 0xFF, 0xFF, 0xFF, 0xFF}, uint16(4))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		whole := drain(t, [][]byte{data})
		cut := int(split) % (len(data) + 1)
		parts := drain(t, [][]byte{data[:cut], data[cut:]})
		if whole != parts {
			t.Fatalf("whole=%q split at %d=%q", whole, cut, parts)
		}
	})
}

func drain(t *testing.T, chunks [][]byte) string {
	d := Decoder{MaxBody: 1 << 16}
	var out bytes.Buffer
	for _, c := range chunks {
		d.Feed(c)
		for {
			m, typ, err := d.Next()
			if err != nil {
				out.WriteString("ERR")
				return out.String()
			}
			if m == nil {
				break
			}
			if TypeOf(m) != typ {
				t.Fatalf("type %v decoded as %T", typ, m)
			}
			out.WriteString(typ.String() + ";")
		}
	}
	return out.String()
}
