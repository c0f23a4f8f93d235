// Package signature is the MAC between the gateway and the masters: the
// gateway signs every request it forwards, and a master believes what the
// gateway vouches for (the caller's identity, the Host and client address it
// saw) only when the signature is valid, fresh and not seen before (API.md,
// Gateway; docs/API.md).
//
// The MAC covers the method, the Host the client used, the path AND the
// query, a SHA-256 of the body, the trace id, the timestamp, a nonce, the
// client's address and the identity headers (with the token's version), so a
// captured signature cannot be replayed with another identity, another body
// or another query, nor replayed at all inside the skew window (Nonces).
// Both sides read the fields from the request through one function
// (AppendRequest, ValidRequest), so they cannot drift apart. It never reads the
// clock itself: callers pass it.
package signature

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// HeaderRunsQueued is on the master's answer to a submission that queued
// more than one run (a sweep, a sweep's retry): how many, so the gateway's
// submission limit counts every member, not the one request.
const HeaderRunsQueued = "X-Rlsched-Runs-Queued"

// Headers the gateway sets on every request it forwards. Clients cannot send
// them: the gateway strips every X-User-* and X-Gateway-* header a client
// sends. The identity headers are absent on an anonymous request.
const (
	HeaderUserID       = "X-User-Id"
	HeaderUserName     = "X-User-Name"
	HeaderUserRole     = "X-User-Role"
	HeaderTokenVersion = "X-User-Token-Version"
	HeaderTimestamp    = "X-Gateway-Timestamp"
	HeaderNonce        = "X-Gateway-Nonce"
	HeaderClientIP     = "X-Gateway-Client-Ip"
	HeaderSignature    = "X-Gateway-Signature"
	// HeaderForwardedHost carries the Host the client sent to the gateway
	// (the gateway sends the master's own host as Host).
	HeaderForwardedHost = "X-Forwarded-Host"
)

// version starts every signed message, so a future format cannot be
// confused with this one (v1 covered neither query, body nor nonce).
const version = "rlsched-gateway-v2"

// Fields are what the MAC covers. Timestamp is Unix milliseconds in decimal
// (X-Gateway-Timestamp). Path and Query are the request target as sent,
// still escaped, split at the first '?' (a '#' and what follows is not
// part of either). BodySHA256 is the hex SHA-256 of the body.
type Fields struct {
	Method, Host, Path, Query, BodySHA256 string
	TraceID, Timestamp, Nonce, ClientIP   string
	UserID, UserName, UserRole, Version   string
}

// emptySHA256 is the hash of an empty body, the common case.
var emptySHA256 = func() string { s := sha256.Sum256(nil); return hex.EncodeToString(s[:]) }()

// appendMessage appends the signed message of req to dst: the one reader of
// the fields on both sides (the gateway after setting the headers above but
// the signature, the master on what it received), without allocating.
// Newlines separate the fields: none of them can hold one (header values and
// request targets cannot), so the encoding is unambiguous.
func appendMessage(dst []byte, req *fasthttp.Request) []byte {
	h := &req.Header
	target := h.RequestURI()
	if i := bytes.IndexByte(target, '#'); i >= 0 {
		target = target[:i]
	}
	path, query, _ := bytes.Cut(target, []byte{'?'})
	dst = append(dst, version...)
	for _, v := range [...][]byte{h.Method(), h.Peek(HeaderForwardedHost), path, query} {
		dst = append(append(dst, '\n'), v...)
	}
	dst = append(dst, '\n')
	if b := req.Body(); len(b) > 0 {
		sum := sha256.Sum256(b)
		dst = hex.AppendEncode(dst, sum[:])
	} else {
		dst = append(dst, emptySHA256...)
	}
	for _, k := range [...]string{"X-Trace-Id", HeaderTimestamp, HeaderNonce, HeaderClientIP,
		HeaderUserID, HeaderUserName, HeaderUserRole, HeaderTokenVersion} {
		dst = append(append(dst, '\n'), h.Peek(k)...)
	}
	return dst
}

// append appends the signed message of f to dst.
func (f *Fields) append(dst []byte) []byte {
	dst = append(dst, version...)
	for _, v := range [...]string{f.Method, f.Host, f.Path, f.Query, f.BodySHA256, f.TraceID, f.Timestamp,
		f.Nonce, f.ClientIP, f.UserID, f.UserName, f.UserRole, f.Version} {
		dst = append(append(dst, '\n'), v...)
	}
	return dst
}

// Of reads the fields of req as the MAC sees them (for tests and logs; the
// gateway and the master sign and check requests with AppendRequest and
// ValidRequest, which read them the same way).
func Of(req *fasthttp.Request) Fields {
	parts := strings.SplitN(string(appendMessage(nil, req)), "\n", 14)
	var f Fields
	for i, p := range []*string{&f.Method, &f.Host, &f.Path, &f.Query, &f.BodySHA256, &f.TraceID, &f.Timestamp,
		&f.Nonce, &f.ClientIP, &f.UserID, &f.UserName, &f.UserRole, &f.Version} {
		*p = parts[i+1]
	}
	return f
}

// Signer computes and checks signatures under one secret. Its methods are
// safe to call from any goroutine.
type Signer struct {
	pool sync.Pool // of *macer
}

// macer is one HMAC-SHA256 under the secret with the buffers of a message
// and its MAC, reused: built on the stack, both escaped through the hash's
// interface (1 KiB a request on the gateway and on the master, 2/3 of the
// gateway's allocated bytes in BenchmarkProxy).
type macer struct {
	h   hash.Hash
	msg []byte
	raw [sha256.Size]byte
}

// NewSigner returns a Signer for secret; it keeps its own copy.
func NewSigner(secret []byte) *Signer {
	key := append([]byte(nil), secret...)
	s := &Signer{}
	s.pool.New = func() any { return &macer{h: hmac.New(sha256.New, key), msg: make([]byte, 0, 1024)} }
	return s
}

// sum returns the raw MAC of m.msg, valid until m is put back.
func (m *macer) sum() []byte {
	m.h.Reset()
	m.h.Write(m.msg)
	return m.h.Sum(m.raw[:0])
}

func (s *Signer) get() *macer { return s.pool.Get().(*macer) }

func (s *Signer) put(m *macer) {
	if cap(m.msg) > 16<<10 { // a huge request's: not kept
		m.msg = make([]byte, 0, 1024)
	}
	s.pool.Put(m)
}

// Sign returns the hex signature of f.
func (s *Signer) Sign(f *Fields) string {
	m := s.get()
	defer s.put(m)
	m.msg = f.append(m.msg[:0])
	return hex.EncodeToString(m.sum())
}

// Valid reports, in constant time, whether sig is the hex signature of f.
func (s *Signer) Valid(f *Fields, sig string) bool {
	m := s.get()
	defer s.put(m)
	m.msg = f.append(m.msg[:0])
	return valid(m, []byte(sig))
}

// AppendRequest appends the hex signature of req (X-Gateway-Signature) to
// dst; the headers it covers must be set.
func (s *Signer) AppendRequest(dst []byte, req *fasthttp.Request) []byte {
	m := s.get()
	defer s.put(m)
	m.msg = appendMessage(m.msg[:0], req)
	return hex.AppendEncode(dst, m.sum())
}

// ValidRequest reports, in constant time, whether req carries its own
// signature in X-Gateway-Signature.
func (s *Signer) ValidRequest(req *fasthttp.Request) bool {
	m := s.get()
	defer s.put(m)
	m.msg = appendMessage(m.msg[:0], req)
	return valid(m, req.Header.Peek(HeaderSignature))
}

// valid reports whether sig is the hex MAC of m.msg.
func valid(m *macer, sig []byte) bool {
	if len(sig) != hex.EncodedLen(sha256.Size) {
		return false
	}
	var got [sha256.Size]byte
	if _, err := hex.Decode(got[:], sig); err != nil {
		return false
	}
	return hmac.Equal(got[:], m.sum())
}

// Timestamp formats t for X-Gateway-Timestamp.
func Timestamp(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// AppendTimestamp appends Timestamp(t) to dst.
func AppendTimestamp(dst []byte, t time.Time) []byte {
	return strconv.AppendInt(dst, t.UnixMilli(), 10)
}

// ParseTimestamp reads an X-Gateway-Timestamp: Unix milliseconds > 0.
func ParseTimestamp(ts string) (int64, bool) {
	ms, err := strconv.ParseInt(ts, 10, 64)
	return ms, err == nil && ms > 0
}

// Fresh reports whether ts (Unix milliseconds) lies within maxSkew of now,
// in either direction.
func Fresh(ts string, now time.Time, maxSkew time.Duration) bool {
	ms, ok := ParseTimestamp(ts)
	if !ok {
		return false
	}
	d := now.Sub(time.UnixMilli(ms))
	return d <= maxSkew && d >= -maxSkew
}
