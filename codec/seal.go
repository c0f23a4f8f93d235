package codec

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"

	"google.golang.org/protobuf/proto"
)

// TagSize is the length of a sealed frame's tag: the first 16 bytes of
// HMAC-SHA256(direction key, seq || header || body), seq being the frame's
// number among the sealed frames of its direction on its connection
// (big-endian u64, from 0). A forged, changed, replayed, reordered or
// dropped frame fails the receiver's check, and so does a frame of
// another connection, whose session key differs (keys.go).
const TagSize = 16

// tagger computes tags under one direction's key, reusing its HMAC state:
// a frame costs no allocation.
type tagger struct {
	mac  hash.Hash
	seq  uint64
	seqb [8]byte
	sum  [sha256.Size]byte
}

func (k *tagger) init(key []byte) { k.mac = hmac.New(sha256.New, key) }

// tag returns the tag of frame (header and body) as the seq-th frame. The
// result aliases k's scratch: use it before the next call.
func (k *tagger) tag(frame []byte) []byte {
	k.mac.Reset()
	binary.BigEndian.PutUint64(k.seqb[:], k.seq)
	k.mac.Write(k.seqb[:])
	k.mac.Write(frame)
	return k.mac.Sum(k.sum[:0])[:TagSize]
}

// Sealer seals the frames one side of a connection sends. It is not safe
// for concurrent use, and frames must reach the peer in the order they were
// sealed: a caller with several sending goroutines seals and queues each
// frame under one lock.
type Sealer struct{ k tagger }

// AppendFrame appends m's sealed frame to dst and returns the extended
// slice. A frame appended to a fresh (nil) dst is one allocation.
func (s *Sealer) AppendFrame(dst []byte, m proto.Message) ([]byte, error) {
	return appendFrame(dst, m, s)
}

// seal appends the tag of dst[start:], a frame with its header's sealed
// flag and length (tag included) set, and counts the frame.
func (s *Sealer) seal(dst []byte, start int) []byte {
	dst = append(dst, s.k.tag(dst[start:])...)
	s.k.seq++
	return dst
}

// Opener checks the tags of the frames one side of a connection receives.
// It is not safe for concurrent use. After a failed check it fails every
// later one: the stream is not to be trusted from there on.
type Opener struct {
	k   tagger
	err error
}

// Open checks the tag of frame, a whole sealed frame whose header
// ParseHeader accepted, as the next frame of the stream.
func (o *Opener) Open(frame []byte) error {
	if o.err != nil {
		return o.err
	}
	if len(frame) < HeaderSize+TagSize || frame[3]&FlagSealed == 0 {
		return fmt.Errorf("BUG: Open given %d bytes that are not a sealed frame", len(frame))
	}
	n := len(frame) - TagSize
	if !hmac.Equal(o.k.tag(frame[:n]), frame[n:]) {
		o.err = fmt.Errorf("%w: the tag of sealed frame %d of this connection (a %s) does not match: forged, changed, replayed, reordered, or sealed with another key",
			ErrTag, o.k.seq, Type(frame[3]&^FlagSealed))
		return o.err
	}
	o.k.seq++
	return nil
}
