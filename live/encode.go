package live

import (
	"encoding/binary"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// Frames of API.md's WebSocket, encoded by appending into a caller's buffer.
// A frame is encoded once per message and its bytes are shared, read-only,
// by every subscriber queue that holds it.

// appendLogFrame encodes raw, the bytes [off, off+len(raw)) of a run's log:
// {"topic":T,"type":"log","offset":N,"nextOffset":M,"data":"..."}.
// nextOffset is the offset after data's bytes; it lets a client keep exact
// offsets even where data had to replace bytes that are not UTF-8.
func appendLogFrame(dst []byte, topic string, off int64, raw []byte) []byte {
	dst = append(dst, `{"topic":"`...)
	dst = append(dst, topic...) // validated: no byte needs escaping
	dst = append(dst, `","type":"log","offset":`...)
	dst = strconv.AppendInt(dst, off, 10)
	dst = append(dst, `,"nextOffset":`...)
	dst = strconv.AppendInt(dst, off+int64(len(raw)), 10)
	dst = append(dst, `,"data":`...)
	dst = appendJSONString(dst, raw)
	return append(dst, '}')
}

// appendLaggedFrame encodes {"topic":T,"type":"lagged"[,"offset":N]}: the
// subscriber missed messages; for a log, the stream goes on at offset N and
// the bytes before it may be fetched over REST.
func appendLaggedFrame(dst []byte, topic string, off int64, withOffset bool) []byte {
	dst = append(dst, `{"topic":"`...)
	dst = append(dst, topic...)
	dst = append(dst, `","type":"lagged"`...)
	if withOffset {
		dst = append(dst, `,"offset":`...)
		dst = strconv.AppendInt(dst, off, 10)
	}
	return append(dst, '}')
}

// appendAckFrame encodes {"type":"subscribed"|"unsubscribed","topic":T[,"offset":N]}.
func appendAckFrame(dst []byte, typ, topic string, off int64, withOffset bool) []byte {
	dst = append(dst, `{"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, `","topic":"`...)
	dst = append(dst, topic...)
	dst = append(dst, '"')
	if withOffset {
		dst = append(dst, `,"offset":`...)
		dst = strconv.AppendInt(dst, off, 10)
	}
	return append(dst, '}')
}

// encodeEvent encodes {"topic":T,"type":typ,"data":v}.
func encodeEvent(topic, typ string, v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(data)+len(topic)+32)
	b = append(b, `{"topic":"`...)
	b = append(b, topic...)
	b = append(b, `","type":"`...)
	b = append(b, typ...)
	b = append(b, `","data":`...)
	b = append(b, data...)
	return append(b, '}'), nil
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Bytes that are not UTF-8
// become U+FFFD (JSON text cannot carry them); control characters and
// U+2028/U+2029 are escaped.
func appendJSONString(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// Log output is mostly printable ASCII: skip 8 such bytes at a time.
		for i+8 <= len(s) && plainASCII8(binary.LittleEndian.Uint64(s[i:])) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// plainASCII8 reports whether none of the 8 bytes in x needs attention in a
// JSON string: each is ASCII, at least 0x20, and neither '"' nor '\\'.
// (v - lsb*c) &^ v & msb is non-zero exactly when some byte of v is below c
// (for bytes under 0x80; bytes with the top bit are caught by x & msb).
func plainASCII8(x uint64) bool {
	q := x ^ (lsb * '"')
	b := x ^ (lsb * '\\')
	return (((x-lsb*0x20)&^x)|((q-lsb)&^q)|((b-lsb)&^b)|x)&msb == 0
}

// utf8Cut returns the length of the longest prefix of b that does not end
// inside a UTF-8 sequence that more bytes could still complete, so a message
// never splits a character. Invalid bytes count as complete.
func utf8Cut(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}
