// Package signature is the MAC between the gateway and the masters: the
// gateway signs the identity it verified, the master checks the signature
// before it believes the identity headers (API.md, Gateway).
//
// The MAC covers the method, the path, the trace id, the timestamp AND the
// three identity headers, so a captured signature cannot be replayed with
// another identity. It never reads the clock or a header itself: callers pass
// every field, and judge freshness with Fresh.
package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"
	"sync"
	"time"
)

// Headers the gateway sets on every request it forwards with an identity.
// Clients cannot send them: the gateway strips every X-User-* and
// X-Gateway-* header a client sends.
const (
	HeaderUserID    = "X-User-Id"
	HeaderUserName  = "X-User-Name"
	HeaderUserRole  = "X-User-Role"
	HeaderTimestamp = "X-Gateway-Timestamp"
	HeaderSignature = "X-Gateway-Signature"
)

// version starts every signed message, so a future format cannot be
// confused with this one.
const version = "rlsched-gateway-v1"

// Fields are what the MAC covers. The timestamp is Unix milliseconds in
// decimal (X-Gateway-Timestamp); Path is the request's path as sent, still
// escaped, without the query.
type Fields struct {
	Method, Path, TraceID, Timestamp string
	UserID, UserName, UserRole       string
}

// Signer computes and checks signatures under one secret. Its methods are
// safe to call from any goroutine.
type Signer struct {
	pool sync.Pool // of hash.Hash (HMAC-SHA256 under the secret)
}

// NewSigner returns a Signer for secret; it keeps its own copy.
func NewSigner(secret []byte) *Signer {
	key := append([]byte(nil), secret...)
	s := &Signer{}
	s.pool.New = func() any { return hmac.New(sha256.New, key) }
	return s
}

// sum appends the raw MAC of f to dst.
func (s *Signer) sum(dst []byte, f *Fields) []byte {
	h := s.pool.Get().(hash.Hash)
	h.Reset()
	// Newlines separate the fields: none of them can hold one (header
	// values and request paths cannot), so the encoding is unambiguous.
	var buf [512]byte
	b := append(buf[:0], version...)
	for _, v := range [...]string{f.Method, f.Path, f.TraceID, f.Timestamp, f.UserID, f.UserName, f.UserRole} {
		b = append(b, '\n')
		b = append(b, v...)
	}
	h.Write(b)
	dst = h.Sum(dst)
	s.pool.Put(h)
	return dst
}

// Append appends the hex signature of f to dst (X-Gateway-Signature).
func (s *Signer) Append(dst []byte, f *Fields) []byte {
	var raw [sha256.Size]byte
	sum := s.sum(raw[:0], f)
	return hex.AppendEncode(dst, sum)
}

// Sign returns the hex signature of f.
func (s *Signer) Sign(f *Fields) string { return string(s.Append(nil, f)) }

// Valid reports, in constant time, whether sig is the hex signature of f.
func (s *Signer) Valid(f *Fields, sig string) bool {
	if len(sig) != hex.EncodedLen(sha256.Size) {
		return false
	}
	var got [sha256.Size]byte
	if _, err := hex.Decode(got[:], []byte(sig)); err != nil {
		return false
	}
	var raw [sha256.Size]byte
	return hmac.Equal(got[:], s.sum(raw[:0], f))
}

// Timestamp formats t for X-Gateway-Timestamp.
func Timestamp(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// AppendTimestamp appends Timestamp(t) to dst.
func AppendTimestamp(dst []byte, t time.Time) []byte {
	return strconv.AppendInt(dst, t.UnixMilli(), 10)
}

// Fresh reports whether ts (Unix milliseconds) lies within maxSkew of now,
// in either direction.
func Fresh(ts string, now time.Time, maxSkew time.Duration) bool {
	ms, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || ms <= 0 {
		return false
	}
	d := now.Sub(time.UnixMilli(ms))
	return d <= maxSkew && d >= -maxSkew
}
