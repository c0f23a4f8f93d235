package codec

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"
)

// Next decodes the frame at the start of buf. It returns the message and n,
// the bytes the frame took; n == 0 with a nil error means buf does not hold
// a whole frame yet. The header is checked (magic, version, type, and the
// length against max) as soon as buf holds it, before any body is waited
// for, so a peer announcing a huge frame is refused without buffering it.
// After an error the stream is unusable. The message does not alias buf.
//
// Next is the one frame parser: the master's event loops reach it through
// NextFrom, blocking readers through ReadFrame, and FuzzNext drives both.
func Next(buf []byte, max int) (proto.Message, int, error) {
	if len(buf) < HeaderSize {
		return nil, 0, nil
	}
	h, err := ParseHeader(buf, max)
	if err != nil {
		return nil, 0, err
	}
	end := HeaderSize + int(h.Length)
	if len(buf) < end {
		return nil, 0, nil
	}
	m, err := DecodeBody(h.Type, buf[HeaderSize:end])
	if err != nil {
		return nil, 0, err
	}
	return m, end, nil
}

// Inbound is a connection's received bytes as an event loop sees them
// (gnet.Conn): bytes returned by Peek stay valid only until Discard.
type Inbound interface {
	Peek(n int) ([]byte, error)
	Discard(n int) (int, error)
	InboundBuffered() int
}

// NextFrom decodes the next frame of in and discards its bytes; (nil, nil)
// means in does not hold a whole frame yet. It peeks the header first and
// has Next check it, then peeks the whole frame only once it is all there:
// a frame arriving in many reads is never copied out of the connection's
// buffer more than once.
func NextFrom(in Inbound, max int) (proto.Message, error) {
	hdr, err := in.Peek(HeaderSize)
	if err != nil || len(hdr) < HeaderSize {
		return nil, nil
	}
	m, n, err := Next(hdr, max)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		size := frameSize(hdr)
		if in.InboundBuffered() < size {
			return nil, nil
		}
		frame, err := in.Peek(size)
		if err != nil {
			return nil, fmt.Errorf("cannot peek a buffered frame of %d bytes: %w", size, err)
		}
		if m, n, err = Next(frame, max); err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("BUG: a buffered frame of %d bytes does not parse whole", size)
		}
	}
	if _, err := in.Discard(n); err != nil {
		return nil, fmt.Errorf("cannot discard a parsed frame: %w", err)
	}
	return m, nil
}

// frameSize is the whole size of the frame whose header Next accepted.
func frameSize(hdr []byte) int { return HeaderSize + int(binary.BigEndian.Uint32(hdr[4:])) }
