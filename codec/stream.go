package codec

import (
	"bufio"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"
)

// ReadFrame reads one frame from r (a blocking reader such as a worker's
// net.Conn wrapped in bufio) and decodes it with Next. The header is checked
// before the body is read. buf is scratch space reused between calls.
func ReadFrame(r *bufio.Reader, maxBody int, buf []byte) (proto.Message, []byte, error) {
	hdr, err := r.Peek(HeaderSize)
	if err != nil {
		if len(hdr) > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, buf, err
	}
	if _, _, err := Next(hdr, maxBody); err != nil {
		return nil, buf, err
	}
	size := frameSize(hdr)
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, buf, fmt.Errorf("cannot read a %s frame of %d bytes: %w", Type(buf[3]), size, err)
	}
	m, _, err := Next(buf, maxBody)
	return m, buf, err
}
