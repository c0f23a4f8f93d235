package codec

import (
	"bufio"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"
)

// ReadFrame reads one frame from r (a blocking reader such as a worker's
// net.Conn wrapped in bufio). buf is scratch space reused between calls.
func ReadFrame(r *bufio.Reader, maxBody int, buf []byte) (proto.Message, []byte, error) {
	var hdr [HeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, buf, err
	}
	h, err := ParseHeader(hdr[:], maxBody)
	if err != nil {
		return nil, buf, err
	}
	if cap(buf) < int(h.Length) {
		buf = make([]byte, h.Length)
	}
	buf = buf[:h.Length]
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, buf, fmt.Errorf("cannot read %s body of %d bytes: %w", h.Type, h.Length, err)
	}
	m, err := DecodeBody(h.Type, buf)
	return m, buf, err
}
