// Package codec frames the master⇄worker protocol: an 8-byte header (magic
// 0x524C, version 1, message type, big-endian u32 length) followed by a
// protobuf body and, on a sealed frame (the type byte's high bit set), a
// 16-byte tag that authenticates the frame under its connection's session
// key and sequence number (seal.go, keys.go). Every frame after the
// master's Challenge is sealed.
//
// It never trusts a length before checking it against the limit, never
// panics on input, and never hands out a message of a sealed stream whose
// tag it has not checked: every malformed or unauthenticated frame is an
// error that says what was wrong, so the caller can close the connection
// with a reason.
package codec

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
)

const (
	Magic      uint16 = 0x524C // "RL"
	Version    uint8  = 1
	HeaderSize        = 8
	// DefaultMaxBody is the default limit on a frame's length, body and
	// tag (16 MiB).
	DefaultMaxBody = 16 << 20
	// FlagSealed in the type byte marks a sealed frame: its length counts
	// a TagSize tag after the body. The tag covers the header, so the flag
	// cannot be flipped unnoticed.
	FlagSealed = 0x80
)

// Type is the message type byte of a frame.
type Type uint8

const (
	TypeChallenge Type = iota + 1
	TypeHello
	TypeHelloAck
	TypeHeartbeat
	TypeHeartbeatAck
	TypeExecuteTask
	TypeTaskStarted
	TypeLogData
	TypeLogAck
	TypeMetric
	TypeCancelTask
	TypeTaskFinished
	TypeTaskFinishedAck
	TypeArtifactChunk
	TypeArtifactAck
	TypeGoodbye
	// The terminal of an interactive run (issue 34).
	TypeTermData
	TypeTermInput
	TypeTermResize
	TypeTermAck
	// The web app of an interactive run, proxied (issue 34).
	TypeProxyOpen
	TypeProxyData
	TypeProxyAck
	TypeProxyClose
	// A run's process is gone before its outputs are stored (issue 33).
	TypeTaskExited
	typeEnd
)

var typeNames = [...]string{"", "Challenge", "Hello", "HelloAck", "Heartbeat", "HeartbeatAck",
	"ExecuteTask", "TaskStarted", "LogData", "LogAck", "Metric", "CancelTask", "TaskFinished",
	"TaskFinishedAck", "ArtifactChunk", "ArtifactAck", "Goodbye", "TermData", "TermInput", "TermResize", "TermAck",
	"ProxyOpen", "ProxyData", "ProxyAck", "ProxyClose", "TaskExited"}

func (t Type) String() string {
	if t > 0 && t < typeEnd {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// Valid reports whether t names a known message type.
func (t Type) Valid() bool { return t > 0 && t < typeEnd }

// New returns an empty message of type t, or nil for an unknown type.
func New(t Type) proto.Message {
	switch t {
	case TypeChallenge:
		return &pb.Challenge{}
	case TypeHello:
		return &pb.Hello{}
	case TypeHelloAck:
		return &pb.HelloAck{}
	case TypeHeartbeat:
		return &pb.Heartbeat{}
	case TypeHeartbeatAck:
		return &pb.HeartbeatAck{}
	case TypeExecuteTask:
		return &pb.ExecuteTask{}
	case TypeTaskStarted:
		return &pb.TaskStarted{}
	case TypeLogData:
		return &pb.LogData{}
	case TypeLogAck:
		return &pb.LogAck{}
	case TypeMetric:
		return &pb.Metric{}
	case TypeCancelTask:
		return &pb.CancelTask{}
	case TypeTaskFinished:
		return &pb.TaskFinished{}
	case TypeTaskFinishedAck:
		return &pb.TaskFinishedAck{}
	case TypeArtifactChunk:
		return &pb.ArtifactChunk{}
	case TypeArtifactAck:
		return &pb.ArtifactAck{}
	case TypeGoodbye:
		return &pb.Goodbye{}
	case TypeTermData:
		return &pb.TermData{}
	case TypeTermInput:
		return &pb.TermInput{}
	case TypeTermResize:
		return &pb.TermResize{}
	case TypeTermAck:
		return &pb.TermAck{}
	case TypeProxyOpen:
		return &pb.ProxyOpen{}
	case TypeProxyData:
		return &pb.ProxyData{}
	case TypeProxyAck:
		return &pb.ProxyAck{}
	case TypeProxyClose:
		return &pb.ProxyClose{}
	case TypeTaskExited:
		return &pb.TaskExited{}
	}
	return nil
}

// TypeOf returns the frame type of a message, or 0 for a message that is not
// part of the protocol.
func TypeOf(m proto.Message) Type {
	switch m.(type) {
	case *pb.Challenge:
		return TypeChallenge
	case *pb.Hello:
		return TypeHello
	case *pb.HelloAck:
		return TypeHelloAck
	case *pb.Heartbeat:
		return TypeHeartbeat
	case *pb.HeartbeatAck:
		return TypeHeartbeatAck
	case *pb.ExecuteTask:
		return TypeExecuteTask
	case *pb.TaskStarted:
		return TypeTaskStarted
	case *pb.LogData:
		return TypeLogData
	case *pb.LogAck:
		return TypeLogAck
	case *pb.Metric:
		return TypeMetric
	case *pb.CancelTask:
		return TypeCancelTask
	case *pb.TaskFinished:
		return TypeTaskFinished
	case *pb.TaskFinishedAck:
		return TypeTaskFinishedAck
	case *pb.ArtifactChunk:
		return TypeArtifactChunk
	case *pb.ArtifactAck:
		return TypeArtifactAck
	case *pb.Goodbye:
		return TypeGoodbye
	case *pb.TermData:
		return TypeTermData
	case *pb.TermInput:
		return TypeTermInput
	case *pb.TermResize:
		return TypeTermResize
	case *pb.TermAck:
		return TypeTermAck
	case *pb.ProxyOpen:
		return TypeProxyOpen
	case *pb.ProxyData:
		return TypeProxyData
	case *pb.ProxyAck:
		return TypeProxyAck
	case *pb.ProxyClose:
		return TypeProxyClose
	case *pb.TaskExited:
		return TypeTaskExited
	}
	return 0
}

// Errors returned for malformed input. They are wrapped with detail; test with errors.Is.
var (
	ErrMagic    = errors.New("bad magic")
	ErrVersion  = errors.New("unsupported version")
	ErrType     = errors.New("unknown message type")
	ErrTooLarge = errors.New("frame body over the size limit")
	ErrBody     = errors.New("body does not decode")
	// ErrTag: a sealed frame whose tag is not its sender's for this
	// connection and sequence number (forged, changed, replayed, reordered
	// or sealed with another key), or too short to hold one.
	ErrTag = errors.New("frame not authenticated")
	// ErrUnsealed: an unsealed frame (other than Goodbye) after the handshake.
	ErrUnsealed = errors.New("frame not sealed")
	// ErrSealed: a sealed frame where no session key is known yet.
	ErrSealed = errors.New("sealed frame before the handshake")
)

// Header is a decoded frame header.
type Header struct {
	Type   Type
	Length uint32 // the bytes after the header: body, and tag when Sealed
	Sealed bool
}

// Size is the whole frame's size, header included.
func (h Header) Size() int { return HeaderSize + int(h.Length) }

// body returns the body of frame, a whole frame with header h.
func (h Header) body(frame []byte) []byte {
	if h.Sealed {
		return frame[HeaderSize : len(frame)-TagSize]
	}
	return frame[HeaderSize:]
}

// ParseHeader checks the 8 header bytes in b against magic, version, type and
// maxBody. It must be called before waiting for the body, so a huge length is
// refused without buffering anything.
func ParseHeader(b []byte, maxBody int) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("BUG: ParseHeader given %d bytes", len(b))
	}
	if m := binary.BigEndian.Uint16(b); m != Magic {
		return Header{}, fmt.Errorf("%w: got 0x%04X, want 0x%04X (header % X)", ErrMagic, m, Magic, b[:HeaderSize])
	}
	if b[2] != Version {
		return Header{}, fmt.Errorf("%w: got %d, want %d", ErrVersion, b[2], Version)
	}
	t := Type(b[3] &^ FlagSealed)
	if !t.Valid() {
		return Header{}, fmt.Errorf("%w: %d", ErrType, b[3])
	}
	sealed := b[3]&FlagSealed != 0
	n := binary.BigEndian.Uint32(b[4:])
	// A u32 cannot be negative on the wire, but a peer that wrote a negative
	// int32 shows up here as a length over 2 GiB, which the limit catches.
	if int64(n) > int64(maxBody) {
		return Header{}, fmt.Errorf("%w: %d bytes for %s, limit %d", ErrTooLarge, n, t, maxBody)
	}
	if sealed && n < TagSize {
		return Header{}, fmt.Errorf("%w: a sealed %s of %d bytes cannot hold its %d-byte tag", ErrTag, t, n, TagSize)
	}
	return Header{Type: t, Length: n, Sealed: sealed}, nil
}

// DecodeBody unmarshals body as a message of type t. The message does not
// alias body, so body may be reused once this returns.
func DecodeBody(t Type, body []byte) (proto.Message, error) {
	m := New(t)
	if m == nil {
		return nil, fmt.Errorf("%w: %d", ErrType, uint8(t))
	}
	if err := proto.Unmarshal(body, m); err != nil {
		return nil, fmt.Errorf("%w: %s of %d bytes: %v", ErrBody, t, len(body), err)
	}
	return m, nil
}

// AppendFrame appends the unsealed frame for m to dst and returns the
// extended slice. Only a Challenge, and a Goodbye that closes a connection,
// go out unsealed; everything else goes through a Sealer.
func AppendFrame(dst []byte, m proto.Message) ([]byte, error) {
	return appendFrame(dst, m, nil)
}

// appendFrame appends m's frame to dst, sealed by s unless s is nil.
func appendFrame(dst []byte, m proto.Message, s *Sealer) ([]byte, error) {
	t := TypeOf(m)
	if t == 0 {
		return dst, fmt.Errorf("BUG: %T is not a protocol message", m)
	}
	typ, tag := byte(t), 0
	if s != nil {
		typ, tag = typ|FlagSealed, TagSize
	}
	start := len(dst)
	// Sized first, so a fresh frame is one allocation rather than a header
	// regrown by the body (and the tag); the marshal then reuses the
	// computed size.
	size := proto.MarshalOptions{}.Size(m)
	if need := HeaderSize + size + tag; cap(dst)-len(dst) < need {
		// Not slices.Grow: under -race it allocates twice.
		grown := make([]byte, len(dst), len(dst)+need)
		copy(grown, dst)
		dst = grown
	}
	dst = append(dst, byte(Magic>>8), byte(Magic&0xFF), Version, typ, 0, 0, 0, 0)
	dst, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(dst, m)
	if err != nil {
		return dst[:start], fmt.Errorf("cannot encode %s: %w", t, err)
	}
	n := len(dst) - start - HeaderSize + tag
	if n > DefaultMaxBody {
		return dst[:start], fmt.Errorf("cannot encode %s: %w: %d bytes", t, ErrTooLarge, n)
	}
	binary.BigEndian.PutUint32(dst[start+4:], uint32(n))
	if s != nil {
		dst = s.seal(dst, start)
	}
	return dst, nil
}
