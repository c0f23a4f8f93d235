package codec

import (
	"bufio"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"
)

// ReadFrame reads one frame from r (a blocking reader such as a worker's
// net.Conn wrapped in bufio) and decodes it with Next (o as there). The
// header is checked before the body is read. buf is scratch space reused
// between calls.
func ReadFrame(r *bufio.Reader, maxBody int, buf []byte, o *Opener) (proto.Message, []byte, error) {
	frame, _, err := ReadRaw(r, maxBody, buf)
	if err != nil {
		return nil, frame, err
	}
	m, _, err := Next(frame, maxBody, o)
	return m, frame, err
}

// ReadRaw reads one whole frame from r into buf (grown when too small) and
// returns it with its header, checked before the body is read.
func ReadRaw(r *bufio.Reader, maxBody int, buf []byte) ([]byte, Header, error) {
	hdr, err := r.Peek(HeaderSize)
	if err != nil {
		if len(hdr) > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return buf, Header{}, err
	}
	h, err := ParseHeader(hdr, maxBody)
	if err != nil {
		return buf, Header{}, err
	}
	size := h.Size()
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	if _, err := io.ReadFull(r, buf); err != nil {
		return buf, Header{}, fmt.Errorf("cannot read a %s frame of %d bytes: %w", h.Type, size, err)
	}
	return buf, h, nil
}
