package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
)

func sample() []proto.Message {
	return []proto.Message{
		&pb.Challenge{Nonce: []byte("0123456789abcdef"), MasterId: "m1"},
		&pb.Hello{WorkerId: "w1", Nonce: []byte("fedcba9876543210"), Host: "h", Slots: 2, Gpus: []*pb.GPU{{Index: 0, Name: "A100", MemoryMb: 40000}},
			Runs: []*pb.RunRef{{TaskId: "t1", Attempt: 1, Fence: 7, AckedLogOffset: 99}}},
		&pb.Heartbeat{Seq: 3},
		&pb.LogData{TaskId: "t1", Attempt: 1, Fence: 7, Offset: 10, Data: []byte("hello\n")},
		&pb.TaskFinished{TaskId: "t1", ExitCode: 0, Outcome: pb.Outcome_OUTCOME_EXITED},
		&pb.Goodbye{},
		&pb.TermData{TaskId: "t1", Attempt: 1, Fence: 7, Offset: 3, Data: []byte("$ ")},
		&pb.TermInput{TaskId: "t1", Attempt: 1, Fence: 7, Data: []byte("ls\r")},
		&pb.TermResize{TaskId: "t1", Attempt: 1, Fence: 7, Cols: 80, Rows: 24},
		&pb.TermAck{TaskId: "t1", Attempt: 1, Fence: 7, Offset: 3},
	}
}

func TestRoundTripByteByByte(t *testing.T) {
	var stream []byte
	for _, m := range sample() {
		var err error
		stream, err = AppendFrame(stream, m)
		if err != nil {
			t.Fatal(err)
		}
	}
	var in inbound
	var got []proto.Message
	for i := range stream {
		in.feed(stream[i : i+1])
		for {
			m, err := NextFrom(&in, DefaultMaxBody, nil)
			if err != nil {
				t.Fatalf("byte %d: %v", i, err)
			}
			if m == nil {
				break
			}
			got = append(got, m)
		}
	}
	want := sample()
	if len(got) != len(want) {
		t.Fatalf("got %d messages, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("message %d: got %v want %v", i, got[i], want[i])
		}
	}
	if in.InboundBuffered() != 0 {
		t.Fatalf("%d bytes left over", in.InboundBuffered())
	}
}

// A header announcing more than the limit is refused before its body is
// there: the master never buffers a frame it would refuse.
func TestNextRefusesTheLengthBeforeTheBody(t *testing.T) {
	hdr := []byte{0x52, 0x4C, 1, byte(TypeHello), 0, 0, 0x10, 0}
	if _, n, err := Next(hdr, 1024, nil); !errors.Is(err, ErrTooLarge) || n != 0 {
		t.Fatalf("Next: n=%d err=%v, want ErrTooLarge", n, err)
	}
	var in inbound
	in.feed(hdr)
	if _, err := NextFrom(&in, 1024, nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("NextFrom: %v, want ErrTooLarge", err)
	}
	if _, _, err := ReadFrame(bufioReader(bytes.NewReader(hdr)), 1024, nil, nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("ReadFrame: %v, want ErrTooLarge", err)
	}
	// Within the limit, the same header waits for its body.
	if m, n, err := Next(hdr, DefaultMaxBody, nil); m != nil || n != 0 || err != nil {
		t.Fatalf("Next within the limit: %v %d %v, want need more", m, n, err)
	}
}

func TestNextConsumesOneFrame(t *testing.T) {
	a, _ := AppendFrame(nil, &pb.Heartbeat{Seq: 1})
	both, _ := AppendFrame(append([]byte(nil), a...), &pb.Goodbye{})
	m, n, err := Next(both, DefaultMaxBody, nil)
	if err != nil || n != len(a) || m.(*pb.Heartbeat).Seq != 1 {
		t.Fatalf("got %v %d %v, want the heartbeat of %d bytes", m, n, err, len(a))
	}
	// An empty body is a whole frame of just the header.
	m, n, err = Next(both[n:], DefaultMaxBody, nil)
	if _, ok := m.(*pb.Goodbye); !ok || n != HeaderSize || err != nil {
		t.Fatalf("got %v %d %v, want a Goodbye of %d bytes", m, n, err, HeaderSize)
	}
}

func TestBadHeaders(t *testing.T) {
	f := func(hdr []byte, want error) {
		t.Helper()
		_, err := ParseHeader(hdr, DefaultMaxBody)
		if !errors.Is(err, want) {
			t.Fatalf("header % X: got %v, want %v", hdr, err, want)
		}
	}
	hdr := func(magic uint16, ver, typ byte, n uint32) []byte {
		b := make([]byte, 8)
		binary.BigEndian.PutUint16(b, magic)
		b[2], b[3] = ver, typ
		binary.BigEndian.PutUint32(b[4:], n)
		return b
	}
	f(hdr(0x4745, 1, 2, 10), ErrMagic) // "GE" of an HTTP GET
	f(hdr(Magic, 2, 2, 10), ErrVersion)
	f(hdr(Magic, 1, 0, 10), ErrType)
	f(hdr(Magic, 1, 200, 10), ErrType)
	f(hdr(Magic, 1, FlagSealed, 20), ErrType)         // the flag alone names no type
	f(hdr(Magic, 1, FlagSealed|2, TagSize-1), ErrTag) // no room for the tag
	f(hdr(Magic, 1, FlagSealed|2, DefaultMaxBody+1), ErrTooLarge)
	f(hdr(Magic, 1, 2, DefaultMaxBody+1), ErrTooLarge)
	f(hdr(Magic, 1, 2, 0xFFFFFFFF), ErrTooLarge) // -1 as int32
}

func TestBodyDoesNotDecode(t *testing.T) {
	frame := []byte{0x52, 0x4C, 1, byte(TypeHello), 0, 0, 0, 3, 0xFF, 0xFF, 0xFF}
	if _, _, err := Next(frame, DefaultMaxBody, nil); !errors.Is(err, ErrBody) {
		t.Fatalf("got %v, want ErrBody", err)
	}
}

func TestReadFrame(t *testing.T) {
	var stream []byte
	for _, m := range sample() {
		stream, _ = AppendFrame(stream, m)
	}
	r := bufioReader(bytes.NewReader(stream))
	var buf []byte
	for i, want := range sample() {
		var m proto.Message
		var err error
		m, buf, err = ReadFrame(r, DefaultMaxBody, buf, nil)
		if err != nil || !proto.Equal(m, want) {
			t.Fatalf("frame %d: %v %v", i, m, err)
		}
	}
}

func BenchmarkAppendHeartbeat(b *testing.B) {
	m := &pb.Heartbeat{Seq: 1, Runs: []*pb.RunRef{{TaskId: "t0123456789", Attempt: 1, Fence: 42}}}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = AppendFrame(buf[:0], m)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkDecodeHeartbeat(b *testing.B) {
	frame, _ := AppendFrame(nil, &pb.Heartbeat{Seq: 1, Runs: []*pb.RunRef{{TaskId: "t0123456789", Attempt: 1, Fence: 42}}})
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, n, err := Next(frame, DefaultMaxBody, nil); err != nil || n != len(frame) {
			b.Fatal(n, err)
		}
	}
}

// The master encodes each reply into a buffer of its own (gnet keeps it
// until written): one allocation of the right size, not a header then a
// regrowth.
func BenchmarkAppendHeartbeatAckFresh(b *testing.B) {
	m := &pb.HeartbeatAck{Seq: 12345}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AppendFrame(nil, m); err != nil {
			b.Fatal(err)
		}
	}
}

func TestAppendFrameFreshIsOneAllocation(t *testing.T) {
	m := &pb.HeartbeatAck{Seq: 12345, LostTaskIds: []string{"t0123456789"}}
	if n := testing.AllocsPerRun(100, func() { _, _ = AppendFrame(nil, m) }); n > 1 {
		t.Fatalf("AppendFrame(nil, ack): %.1f allocations, want 1", n)
	}
}
