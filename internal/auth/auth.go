// Package auth is rlsched's one check of a login token, shared by the master
// (httpapi) and the gateway: it issues and verifies the HS256 JWTs of
// API.md, and finds a request's token (the Authorization: Bearer header,
// else ?token= where a WebSocket may use it, else the jwt_token cookie).
//
// It never reads the store: whether a verified token was revoked (its
// version is older than the user's) is the master's question. It never logs
// or returns a token in an error.
package auth

import (
	"bytes"
	"hash/maphash"
	"strconv"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"
)

// CookieName carries the login token for browsers and WebSockets.
const CookieName = "jwt_token"

// MaxTokenLen bounds a token before it is parsed.
const MaxTokenLen = 8192

// claims of an rlsched token: sub is the user id; name and role are for
// clients and the gateway (the master re-reads the user by id); ver is the
// user's token version when the token was issued.
type claims struct {
	Name    string `json:"name"`
	Role    string `json:"role"`
	Version int64  `json:"ver,omitempty"`
	jwt.RegisteredClaims
}

// Identity is what a verified token says of its user.
type Identity struct {
	UserID int64
	Name   string
	Role   string
	// Version is the user's token version at issue; a token whose version
	// is below the user's current one is revoked.
	Version int64
}

// Tokens issues and verifies tokens under one secret. Its methods are safe
// to call from any goroutine.
//
// A client sends the same token with every request, and parsing it (base64,
// JSON, HMAC) is the costliest step of a check; so tokens that verified are
// kept in a bounded cache keyed by their exact bytes, with their expiry (and
// not-before) checked again on every use. Only successes are cached: a
// changed byte is another key.
type Tokens struct {
	secret []byte
	now    func() time.Time
	parser *jwt.Parser
	seed   maphash.Seed
	shards [16]tokenShard
}

// tokenCacheShard bounds each shard; a full shard is emptied (tokens of
// active clients come back after one parse).
const tokenCacheShard = 1024

type tokenShard struct {
	mu sync.RWMutex
	m  map[string]cachedToken
}

type cachedToken struct {
	who      Identity
	exp, nbf int64 // unix seconds; nbf 0 when absent
}

// NewTokens returns Tokens for secret (it keeps its own copy) on the clock
// now (time.Now when nil).
func NewTokens(secret []byte, now func() time.Time) *Tokens {
	if now == nil {
		now = time.Now
	}
	t := &Tokens{
		secret: append([]byte(nil), secret...),
		now:    now,
		seed:   maphash.MakeSeed(),
		parser: jwt.NewParser(
			// The algorithm is pinned: "none" and RS/ES confusions fail.
			jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
			jwt.WithExpirationRequired(),
			jwt.WithTimeFunc(now),
		),
	}
	for i := range t.shards {
		t.shards[i].m = map[string]cachedToken{}
	}
	return t
}

// Issue signs a token for who, valid from now until exp.
func (t *Tokens) Issue(who Identity, now, exp time.Time) (string, error) {
	c := claims{
		Name:    who.Name,
		Role:    who.Role,
		Version: who.Version,
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   strconv.FormatInt(who.UserID, 10),
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(exp),
		},
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(t.secret)
}

func (t *Tokens) keyFunc(*jwt.Token) (any, error) { return t.secret, nil }

// Verify returns the identity of tok, or false when tok is not a valid,
// unexpired token of this secret. Name and role are as the token says them:
// whoever forwards them in headers checks them with HeaderSafe.
func (t *Tokens) Verify(tok []byte) (Identity, bool) {
	if len(tok) == 0 || len(tok) > MaxTokenLen {
		return Identity{}, false
	}
	sh := &t.shards[maphash.Bytes(t.seed, tok)%uint64(len(t.shards))]
	now := t.now().Unix()
	sh.mu.RLock()
	c, ok := sh.m[string(tok)]
	sh.mu.RUnlock()
	if ok {
		// jwt's own rule: expired once now is at or past exp.
		if now < c.exp && now >= c.nbf {
			return c.who, true
		}
		return Identity{}, false
	}
	var cl claims
	if _, err := t.parser.ParseWithClaims(string(tok), &cl, t.keyFunc); err != nil {
		return Identity{}, false
	}
	id, err := strconv.ParseInt(cl.Subject, 10, 64)
	if err != nil || id <= 0 || cl.Version < 0 {
		return Identity{}, false
	}
	who := Identity{UserID: id, Name: cl.Name, Role: cl.Role, Version: cl.Version}
	c = cachedToken{who: who, exp: cl.ExpiresAt.Unix()}
	if cl.NotBefore != nil {
		c.nbf = cl.NotBefore.Unix()
	}
	sh.mu.Lock()
	if len(sh.m) >= tokenCacheShard {
		clear(sh.m)
	}
	sh.m[string(tok)] = c
	sh.mu.Unlock()
	return who, true
}

// HeaderSafe reports whether s can travel as a header value (and inside the
// gateway's signed message) unchanged: 1–128 visible ASCII characters.
func HeaderSafe(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// Source says where a request's token came from.
type Source uint8

const (
	// None: the request carries no token.
	None Source = iota
	// Bearer: the Authorization header (a malformed one gives no token,
	// never a fallback to the cookie).
	Bearer
	// Query: ?token=, which only a WebSocket upgrade may use (browsers
	// cannot set headers on one).
	Query
	// Cookie: the jwt_token cookie, which a browser attaches by itself,
	// also to requests another site's page makes: see internal/crosssite.
	Cookie
)

// FromAppRequest finds the token of a request to an interactive run's
// web app (/sessions/<id>/...): Authorization: Bearer, else the jwt_token
// cookie. Any other Authorization scheme is the app's own (Jupyter's
// "token ..."), passed to it, not ours to refuse.
func FromAppRequest(req *fasthttp.Request) ([]byte, Source) {
	if h := req.Header.Peek(fasthttp.HeaderAuthorization); IsBearer(h) {
		return bytes.TrimSpace(h[len("bearer "):]), Bearer
	}
	if c := req.Header.Cookie(CookieName); len(c) > 0 {
		return c, Cookie
	}
	return nil, None
}

// IsBearer: h, an Authorization header, is a bearer token.
func IsBearer(h []byte) bool {
	const prefix = "bearer "
	return len(h) > len(prefix) && bytes.EqualFold(h[:len(prefix)], []byte(prefix))
}

// FromRequest finds the token of a request: Authorization: Bearer, else
// ?token= when query is true, else the jwt_token cookie. The bytes point into
// the request and are valid while it is.
func FromRequest(req *fasthttp.Request, query bool) ([]byte, Source) {
	if h := req.Header.Peek(fasthttp.HeaderAuthorization); len(h) > 0 {
		const prefix = "bearer "
		if len(h) <= len(prefix) || !bytes.EqualFold(h[:len(prefix)], []byte(prefix)) {
			return nil, Bearer
		}
		return bytes.TrimSpace(h[len(prefix):]), Bearer
	}
	if query {
		if t := req.URI().QueryArgs().Peek("token"); len(t) > 0 {
			return t, Query
		}
	}
	if c := req.Header.Cookie(CookieName); len(c) > 0 {
		return c, Cookie
	}
	return nil, None
}
