package codec

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
)

// Fixed test material: a join token, the Challenge and Hello nonces.
var (
	testToken   = []byte("codec-test-join-token")
	testNm      = []byte("0123456789abcdef")
	testNw      = []byte("fedcba9876543210")
	testWorkerK = WorkerKey(testToken, "w1")
)

// pair returns the two sides of one connection of worker w1 with master m1.
func pair(t testing.TB) (worker, master Session) {
	t.Helper()
	w, err := WorkerSession(testWorkerK, testNm, testNw, "w1", "m1")
	if err != nil {
		t.Fatal(err)
	}
	m, err := MasterSession(testWorkerK, testNm, testNw, "w1", "m1")
	if err != nil {
		t.Fatal(err)
	}
	return w, m
}

func sealAll(t testing.TB, s *Sealer, msgs []proto.Message) []byte {
	t.Helper()
	var out []byte
	for _, m := range msgs {
		var err error
		if out, err = s.AppendFrame(out, m); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// The derivation is part of the protocol: a change here is a change of the
// wire format that workers of the previous version cannot follow.
func TestWorkerKeyIsFixed(t *testing.T) {
	mac := hmac.New(sha256.New, []byte("join-token-of-sixteen"))
	mac.Write([]byte("rlsched worker key v1\x00w-7"))
	want := mac.Sum(nil)
	got := WorkerKey([]byte("join-token-of-sixteen"), "w-7")
	if !bytes.Equal(got, want) || len(got) != WorkerKeySize {
		t.Fatalf("WorkerKey = %x, want %x", got, want)
	}
	if bytes.Equal(got, WorkerKey([]byte("join-token-of-sixteen"), "w-8")) {
		t.Fatal("two worker ids share a key")
	}
	back, err := ParseWorkerKey(hex.EncodeToString(got))
	if err != nil || !bytes.Equal(back, got) {
		t.Fatalf("ParseWorkerKey(hex) = %x, %v", back, err)
	}
}

func TestParseWorkerKeyRefuses(t *testing.T) {
	f := func(s, want string) {
		t.Helper()
		if _, err := ParseWorkerKey(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("ParseWorkerKey(%q) = %v, want an error with %q", s, err, want)
		}
	}
	f("", "not 0 characters")
	f(strings.Repeat("a", 31), "64 hex digits")
	f(strings.Repeat("a", 63), "not 63")
	f(strings.Repeat("g", 64), "invalid byte")
	f(strings.Repeat("a", 65), "not 65")
}

func TestCheckJoinToken(t *testing.T) {
	if err := CheckJoinToken(strings.Repeat("x", MinJoinToken)); err != nil {
		t.Fatalf("a token of %d bytes: %v", MinJoinToken, err)
	}
	for _, tok := range []string{"", "s3cret", strings.Repeat("x", MinJoinToken-1)} {
		if err := CheckJoinToken(tok); err == nil {
			t.Fatalf("token %q accepted", tok)
		}
	}
}

// Sealed frames read back in order, through every parser, split anywhere.
func TestSealedRoundTrip(t *testing.T) {
	w, m := pair(t)
	stream := sealAll(t, w.Send, sample())
	var in inbound
	var got []proto.Message
	for i := range stream {
		in.feed(stream[i : i+1])
		for {
			msg, err := NextFrom(&in, DefaultMaxBody, m.Recv)
			if err != nil {
				t.Fatalf("byte %d: %v", i, err)
			}
			if msg == nil {
				break
			}
			got = append(got, msg)
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
	// The other direction, through ReadFrame.
	back := sealAll(t, m.Send, want)
	r := bufioReader(bytes.NewReader(back))
	var buf []byte
	for i := range want {
		msg, b, err := ReadFrame(r, DefaultMaxBody, buf, w.Recv)
		buf = b
		if err != nil || !proto.Equal(msg, want[i]) {
			t.Fatalf("frame %d: %v %v", i, msg, err)
		}
	}
}

// Flipping any one bit of a sealed stream never yields a message that was
// not sent: the frame fails its tag, or its header, or (a longer length)
// waits for bytes that never come.
func TestSealedFrameTampered(t *testing.T) {
	w, _ := pair(t)
	frame := sealAll(t, w.Send, []proto.Message{&pb.LogData{TaskId: "t1", Attempt: 1, Fence: 7, Data: []byte("hello")}})
	for i := range frame {
		for bit := range 8 {
			_, m := pair(t)
			bad := bytes.Clone(frame)
			bad[i] ^= 1 << bit
			msg, n, err := Next(bad, DefaultMaxBody, m.Recv)
			if msg != nil {
				t.Fatalf("byte %d bit %d flipped: decoded %v", i, bit, msg)
			}
			if err == nil && n != 0 {
				t.Fatalf("byte %d bit %d flipped: consumed %d bytes without an error", i, bit, n)
			}
			if i >= HeaderSize && !errors.Is(err, ErrTag) {
				t.Fatalf("byte %d bit %d flipped in the body or tag: %v, want ErrTag", i, bit, err)
			}
		}
	}
}

// A frame replayed, reordered, reflected back to its sender, or replayed on
// another connection fails its tag; an opener that failed keeps failing.
func TestSealedReplayAndReorder(t *testing.T) {
	w, m := pair(t)
	a := sealAll(t, w.Send, []proto.Message{&pb.Heartbeat{Seq: 1}})
	b := sealAll(t, w.Send, []proto.Message{&pb.Heartbeat{Seq: 2}})
	if _, _, err := Next(a, DefaultMaxBody, m.Recv); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Next(a, DefaultMaxBody, m.Recv); !errors.Is(err, ErrTag) {
		t.Fatalf("replayed frame: %v, want ErrTag", err)
	}
	if _, _, err := Next(b, DefaultMaxBody, m.Recv); !errors.Is(err, ErrTag) {
		t.Fatalf("after a failure: %v, want ErrTag", err)
	}

	w, m = pair(t)
	a = sealAll(t, w.Send, []proto.Message{&pb.Heartbeat{Seq: 1}})
	b = sealAll(t, w.Send, []proto.Message{&pb.Heartbeat{Seq: 2}})
	if _, _, err := Next(b, DefaultMaxBody, m.Recv); !errors.Is(err, ErrTag) {
		t.Fatalf("second frame first: %v, want ErrTag", err)
	}
	if _, _, err := Next(a, DefaultMaxBody, w.Recv); !errors.Is(err, ErrTag) {
		t.Fatalf("a worker's own frame reflected back to it: %v, want ErrTag", err)
	}

	// Another connection of the same worker: a fresh master nonce.
	other, err := MasterSession(testWorkerK, []byte("another-nonce-16"), testNw, "w1", "m1")
	if err != nil {
		t.Fatal(err)
	}
	w, _ = pair(t)
	a = sealAll(t, w.Send, []proto.Message{&pb.Heartbeat{Seq: 1}})
	if _, _, err := Next(a, DefaultMaxBody, other.Recv); !errors.Is(err, ErrTag) {
		t.Fatalf("a frame of another connection: %v, want ErrTag", err)
	}
}

// Sealed and unsealed frames are never taken for each other; an unsealed
// Goodbye is accepted on a sealed stream.
func TestSealedAndUnsealedStreams(t *testing.T) {
	w, m := pair(t)
	hb := sealAll(t, w.Send, []proto.Message{&pb.Heartbeat{Seq: 1}})
	if _, _, err := Next(hb, DefaultMaxBody, nil); !errors.Is(err, ErrSealed) {
		t.Fatalf("sealed frame on an unsealed stream: %v, want ErrSealed", err)
	}
	plain, _ := AppendFrame(nil, &pb.Heartbeat{Seq: 1})
	if _, _, err := Next(plain, DefaultMaxBody, m.Recv); !errors.Is(err, ErrUnsealed) {
		t.Fatalf("unsealed Heartbeat on a sealed stream: %v, want ErrUnsealed", err)
	}
	_, m = pair(t)
	bye, _ := AppendFrame(nil, &pb.Goodbye{Reason: "bye"})
	msg, _, err := Next(bye, DefaultMaxBody, m.Recv)
	if g, ok := msg.(*pb.Goodbye); err != nil || !ok || g.Reason != "bye" {
		t.Fatalf("unsealed Goodbye on a sealed stream: %v %v", msg, err)
	}
	// It did not count: the worker's first sealed frame still opens.
	if _, _, err := Next(hb, DefaultMaxBody, m.Recv); err != nil {
		t.Fatalf("the first sealed frame after an unsealed Goodbye: %v", err)
	}
}

func TestHandshake(t *testing.T) {
	ch := &pb.Challenge{Nonce: testNm, MasterId: "m1"}
	keyOf := func(id string) ([]byte, error) { return WorkerKey(testToken, id), nil }
	f := func(kw []byte, h *pb.Hello) (*pb.Hello, Session, Session, error) {
		t.Helper()
		frame, ws, err := WorkerHello(nil, kw, ch, h)
		if err != nil {
			t.Fatal(err)
		}
		got, ms, err := AcceptHello(frame, testNm, "m1", keyOf)
		return got, ws, ms, err
	}
	got, ws, ms, err := f(testWorkerK, &pb.Hello{WorkerId: "w1", Slots: 3})
	if err != nil || got.WorkerId != "w1" || got.Slots != 3 || len(got.Nonce) != NonceSize {
		t.Fatalf("AcceptHello: %v %v", got, err)
	}
	ack, _ := ms.Send.AppendFrame(nil, &pb.HelloAck{Session: "s"})
	if msg, _, err := Next(ack, DefaultMaxBody, ws.Recv); err != nil || msg.(*pb.HelloAck).Session != "s" {
		t.Fatalf("HelloAck on the worker: %v %v", msg, err)
	}
	up, _ := ws.Send.AppendFrame(nil, &pb.Heartbeat{Seq: 1})
	if _, _, err := Next(up, DefaultMaxBody, ms.Recv); err != nil {
		t.Fatalf("the worker's next frame on the master: %v", err)
	}

	// Another worker's key, or a key of another token, under w1's id.
	if _, _, _, err := f(WorkerKey(testToken, "w2"), &pb.Hello{WorkerId: "w1"}); !errors.Is(err, ErrTag) ||
		!strings.Contains(err.Error(), `worker "w1" is not sealed with that worker's key`) {
		t.Fatalf("w2's key under w1: %v", err)
	}
	if _, _, _, err := f(WorkerKey([]byte("another-join-token"), "w1"), &pb.Hello{WorkerId: "w1"}); !errors.Is(err, ErrTag) {
		t.Fatalf("a key of another token: %v", err)
	}
	// keyFor's refusal is the refusal.
	no := errors.New("w9 is not allowed")
	frame, _, _ := WorkerHello(nil, testWorkerK, ch, &pb.Hello{WorkerId: "w9"})
	if _, _, err := AcceptHello(frame, testNm, "m1", func(string) ([]byte, error) { return nil, no }); !errors.Is(err, no) {
		t.Fatalf("refused id: %v", err)
	}
	// Under another master id (a Challenge changed on the way).
	frame, _, _ = WorkerHello(nil, testWorkerK, &pb.Challenge{Nonce: testNm, MasterId: "evil"}, &pb.Hello{WorkerId: "w1"})
	if _, _, err := AcceptHello(frame, testNm, "m1", keyOf); !errors.Is(err, ErrTag) {
		t.Fatalf("Hello for another master id: %v", err)
	}
	// An unsealed Hello (an older worker), and one without its nonce.
	plain, _ := AppendFrame(nil, &pb.Hello{WorkerId: "w1"})
	if _, _, err := AcceptHello(plain, testNm, "m1", keyOf); !errors.Is(err, ErrUnsealed) || !strings.Contains(err.Error(), "upgrade") {
		t.Fatalf("unsealed Hello: %v", err)
	}
	s, _ := WorkerSession(testWorkerK, testNm, testNw, "w1", "m1")
	short, _ := s.Send.AppendFrame(nil, &pb.Hello{WorkerId: "w1", Nonce: []byte("short")})
	if _, _, err := AcceptHello(short, testNm, "m1", keyOf); err == nil || !strings.Contains(err.Error(), "nonces of 16 and 5 bytes") {
		t.Fatalf("Hello with a short nonce: %v", err)
	}
	if _, _, err := WorkerHello(nil, testWorkerK, &pb.Challenge{Nonce: []byte("x")}, &pb.Hello{WorkerId: "w1"}); err == nil {
		t.Fatal("a Challenge with a short nonce was answered")
	}
}

// Sealing and opening reuse the HMAC state and the caller's buffer: no
// allocation per frame.
func TestSealingDoesNotAllocate(t *testing.T) {
	ld := &pb.LogData{TaskId: "t0123456789", Attempt: 1, Fence: 42, Offset: 1 << 20, Data: bytes.Repeat([]byte("x"), 4096)}
	w, _ := pair(t)
	buf := make([]byte, 0, 8192)
	if n := testing.AllocsPerRun(100, func() { buf, _ = w.Send.AppendFrame(buf[:0], ld) }); n != 0 {
		t.Fatalf("Sealer.AppendFrame into a buffer with room: %.1f allocations, want 0", n)
	}
	ack := &pb.HeartbeatAck{Seq: 12345, LostTaskIds: []string{"t0123456789"}}
	if n := testing.AllocsPerRun(100, func() { _, _ = w.Send.AppendFrame(nil, ack) }); n > 1 {
		t.Fatalf("Sealer.AppendFrame(nil, ack): %.1f allocations, want 1", n)
	}
	// AllocsPerRun calls its function once more than it counts.
	w, m := pair(t)
	frames := make([][]byte, 101)
	for i := range frames {
		frames[i], _ = w.Send.AppendFrame(nil, ld)
	}
	i := 0
	if n := testing.AllocsPerRun(100, func() {
		if err := m.Recv.Open(frames[i]); err != nil {
			t.Fatal(err)
		}
		i++
	}); n != 0 {
		t.Fatalf("Opener.Open: %.1f allocations, want 0", n)
	}
}

func BenchmarkSealLogData64KiB(b *testing.B) {
	w, _ := pair(b)
	ld := &pb.LogData{TaskId: "t0123456789", Attempt: 1, Fence: 42, Data: bytes.Repeat([]byte("x"), 64<<10)}
	buf := make([]byte, 0, 70<<10)
	b.ReportAllocs()
	b.SetBytes(64 << 10)
	for b.Loop() {
		buf, _ = w.Send.AppendFrame(buf[:0], ld)
	}
}

func BenchmarkOpenLogData64KiB(b *testing.B) {
	ld := &pb.LogData{TaskId: "t0123456789", Attempt: 1, Fence: 42, Data: bytes.Repeat([]byte("x"), 64<<10)}
	frame, _ := AppendFrame(nil, ld)
	o := &Opener{}
	o.k.init(testWorkerK)
	b.ReportAllocs()
	b.SetBytes(64 << 10)
	for b.Loop() {
		// The tag check alone, on a frame whose tag never matches: the
		// cost of a check is the same whether it passes or fails.
		o.err = nil
		_ = o.k.tag(frame)
	}
}

func BenchmarkSealHeartbeat(b *testing.B) {
	w, _ := pair(b)
	m := &pb.Heartbeat{Seq: 1, Runs: []*pb.RunRef{{TaskId: "t0123456789", Attempt: 1, Fence: 42}}}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = w.Send.AppendFrame(buf[:0], m)
	}
	b.SetBytes(int64(len(buf)))
}

// The tag is part of the protocol: AES-256-GMAC of header || body, nonce
// 0^32 || seq.
func TestTagIsGMACOfSeq(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	var k tagger
	k.init(key)
	frame := []byte("header+body of a frame")
	blk, _ := aes.NewCipher(key)
	g, _ := cipher.NewGCM(blk)
	for seq := range uint64(3) {
		k.seq = seq
		nonce := make([]byte, 12)
		nonce[11] = byte(seq)
		if got, want := k.tag(frame), g.Seal(nil, nonce, nil, frame); !bytes.Equal(got, want) || len(got) != TagSize {
			t.Fatalf("seq %d: tag %x, want %x", seq, got, want)
		}
	}
}

// A run token is the protocol's derivation (docs/protocol.md), and each of
// worker, run, attempt, fence and join token changes it.
func TestRunTokenIsFixed(t *testing.T) {
	tok := []byte("join-token-of-sixteen")
	mac := hmac.New(sha256.New, tok)
	mac.Write([]byte("rlsched run token v1\x00w-7\x00r1\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x01\x00"))
	want := mac.Sum(nil)[:RunTokenSize]
	got := RunToken(tok, "w-7", "r1", 2, 256)
	if !bytes.Equal(got, want) || !CheckRunToken(tok, "w-7", "r1", 2, 256, got) {
		t.Fatalf("RunToken = %x, want %x", got, want)
	}
	for _, other := range [][]byte{RunToken(tok, "w-8", "r1", 2, 256), RunToken(tok, "w-7", "r2", 2, 256),
		RunToken(tok, "w-7", "r1", 3, 256), RunToken(tok, "w-7", "r1", 2, 257), RunToken([]byte("join-token-of-seventeen"), "w-7", "r1", 2, 256)} {
		if bytes.Equal(other, got) || CheckRunToken(tok, "w-7", "r1", 2, 256, other) {
			t.Fatalf("two runs share the token %x", got)
		}
	}
	if CheckRunToken(tok, "w-7", "r1", 2, 256, nil) || CheckRunToken(tok, "w-7", "r1", 2, 256, got[:8]) {
		t.Fatal("an empty or short token passes")
	}
}
