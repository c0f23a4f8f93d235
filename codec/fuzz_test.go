package codec

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
)

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }

// inbound is a connection's receive buffer as gnet keeps it: bytes are
// appended as reads arrive, peeked, and discarded once parsed. Discarded
// bytes are overwritten, so a message that aliased them would show it.
type inbound struct{ buf []byte }

func (in *inbound) feed(p []byte)        { in.buf = append(in.buf, p...) }
func (in *inbound) InboundBuffered() int { return len(in.buf) }

func (in *inbound) Peek(n int) ([]byte, error) {
	if n > len(in.buf) {
		return nil, io.ErrShortBuffer
	}
	return in.buf[:n], nil
}

func (in *inbound) Discard(n int) (int, error) {
	for i := range in.buf[:n] {
		in.buf[i] = 0xAA
	}
	in.buf = append(in.buf[:0], in.buf[n:]...)
	return n, nil
}

// FuzzNext drives the parser the master runs (NextFrom over an event
// loop's buffer) and the one the worker runs (ReadFrame over a bufio
// reader) with arbitrary bytes, each as an unsealed stream (before the
// handshake) and as a sealed one (the master's side of the fixed test
// session, pair): fed whole, split in two at an arbitrary point (as a TCP
// read splits a frame), and byte by byte. Neither may panic, and all four
// must decode the same messages and fail at the same frame. The seeds hold
// validly sealed streams, so mutations reach the tag check and, past it,
// the body decoder.
func FuzzNext(f *testing.F) {
	add := func(fr []byte) {
		f.Add(fr, uint16(3))
		f.Add(fr[:len(fr)-1], uint16(5))
		bad := bytes.Clone(fr)
		bad[len(bad)-1] ^= 0xFF
		f.Add(bad, uint16(9))
	}
	for _, m := range sample() {
		fr, _ := AppendFrame(nil, m)
		add(fr)
		two, _ := AppendFrame(bytes.Clone(fr), m)
		f.Add(two, uint16(len(fr)+1))
	}
	w, _ := pair(f)
	sealed := sealAll(f, w.Send, sample())
	add(sealed)
	f.Add(sealed, uint16(len(sealed)/2))
	bye, _ := AppendFrame(nil, &pb.Goodbye{Reason: "x"})
	f.Add(append(bye, sealed...), uint16(len(bye)))
	f.Add([]byte{0x52, 0x4C, 1, 2, 0xFF, 0xFF, 0xFF, 0xFF}, uint16(4))
	f.Add([]byte{0x52, 0x4C, 1, 0x82, 0, 0, 0, 3, 1, 2, 3}, uint16(4))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		const max = 1 << 16
		for _, sealed := range []bool{false, true} {
			opener := func() *Opener {
				if !sealed {
					return nil
				}
				_, m := pair(t)
				return m.Recv
			}
			whole := drain(t, max, opener(), data)
			cut := int(split) % (len(data) + 1)
			if parts := drain(t, max, opener(), data[:cut], data[cut:]); parts != whole {
				t.Fatalf("sealed=%v whole=%q split at %d=%q", sealed, whole, cut, parts)
			}
			var bytewise [][]byte
			for i := range data {
				bytewise = append(bytewise, data[i:i+1])
			}
			if got := drain(t, max, opener(), bytewise...); got != whole {
				t.Fatalf("sealed=%v whole=%q byte by byte=%q", sealed, whole, got)
			}
			if got := readAll(t, max, opener(), data); got != whole {
				t.Fatalf("sealed=%v NextFrom=%q ReadFrame=%q", sealed, whole, got)
			}
		}
	})
}

// drain feeds chunks into an inbound buffer, as reads arrive, and parses
// every whole frame after each, the way the master's OnTraffic does.
func drain(t *testing.T, max int, o *Opener, chunks ...[]byte) string {
	var in inbound
	var out bytes.Buffer
	for _, c := range chunks {
		in.feed(c)
		for {
			m, err := NextFrom(&in, max, o)
			if err != nil {
				return out.String() + "ERR"
			}
			if m == nil {
				break
			}
			out.WriteString(describe(t, m))
		}
	}
	return out.String()
}

// readAll reads frames as the worker does until the input ends; an input
// that ends inside a frame is the "need more" of NextFrom.
func readAll(t *testing.T, max int, o *Opener, data []byte) string {
	r := bufio.NewReaderSize(bytes.NewReader(data), 16)
	var out bytes.Buffer
	var buf []byte
	for {
		m, b, err := ReadFrame(r, max, buf, o)
		buf = b
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return out.String()
		}
		if err != nil {
			return out.String() + "ERR"
		}
		out.WriteString(describe(t, m))
	}
}

func describe(t *testing.T, m proto.Message) string {
	typ := TypeOf(m)
	if typ == 0 {
		t.Fatalf("decoded %T, not a protocol message", m)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatalf("a decoded %s does not encode: %v", typ, err)
	}
	return fmt.Sprintf("%s:%x;", typ, b)
}
