package codec

import (
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
// o is the stream's Opener once the handshake set up its session, nil
// before: with o, every frame must be sealed and its tag is checked before
// its body is decoded (an unsealed Goodbye passes: it only says why the
// peer closes, and anyone on the path could close the connection anyway);
// without, a sealed frame is an error.
//
// Next is the one frame parser: the master's event loops reach it through
// NextFrom, blocking readers through ReadFrame, and FuzzNext drives both.
func Next(buf []byte, max int, o *Opener) (proto.Message, int, error) {
	if len(buf) < HeaderSize {
		return nil, 0, nil
	}
	h, err := ParseHeader(buf, max)
	if err != nil {
		return nil, 0, err
	}
	end := h.Size()
	if len(buf) < end {
		return nil, 0, nil
	}
	frame := buf[:end]
	switch {
	case o == nil && h.Sealed:
		return nil, 0, fmt.Errorf("%w: %s", ErrSealed, h.Type)
	case o != nil && !h.Sealed && h.Type != TypeGoodbye:
		return nil, 0, fmt.Errorf("%w: %s after the handshake", ErrUnsealed, h.Type)
	case o != nil && h.Sealed:
		if err := o.Open(frame); err != nil {
			return nil, 0, err
		}
	}
	m, err := DecodeBody(h.Type, h.body(frame))
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

// NextFrom decodes the next frame of in with Next (o as there) and discards
// its bytes; (nil, nil) means in does not hold a whole frame yet.
func NextFrom(in Inbound, max int, o *Opener) (proto.Message, error) {
	frame, _, err := PeekFrame(in, max)
	if err != nil || frame == nil {
		return nil, err
	}
	m, n, err := Next(frame, max, o)
	if err != nil {
		return nil, err
	}
	if n != len(frame) {
		return nil, fmt.Errorf("BUG: a buffered frame of %d bytes does not parse whole", len(frame))
	}
	if _, err := in.Discard(n); err != nil {
		return nil, fmt.Errorf("cannot discard a parsed frame: %w", err)
	}
	return m, nil
}

// PeekFrame returns the next whole frame of in and its header, without
// discarding it, or a nil frame while in does not hold it all yet. It peeks
// the header first and checks it, then peeks the whole frame only once it
// is all there: a frame arriving in many reads is never copied out of the
// connection's buffer more than once. The frame is valid until in's next
// Discard.
func PeekFrame(in Inbound, max int) ([]byte, Header, error) {
	hdr, err := in.Peek(HeaderSize)
	if err != nil || len(hdr) < HeaderSize {
		return nil, Header{}, nil
	}
	h, err := ParseHeader(hdr, max)
	if err != nil {
		return nil, Header{}, err
	}
	size := h.Size()
	if in.InboundBuffered() < size {
		return nil, Header{}, nil
	}
	frame, err := in.Peek(size)
	if err != nil || len(frame) < size {
		return nil, Header{}, fmt.Errorf("cannot peek a buffered frame of %d bytes: %v", size, err)
	}
	return frame[:size], h, nil
}
