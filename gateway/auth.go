package gateway

import (
	"bytes"
	"hash/maphash"
	"strconv"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"
)

// cookieName is the login cookie the master sets (httpapi.CookieName).
const cookieName = "jwt_token"

// maxTokenLen bounds a token before it is parsed.
const maxTokenLen = 8192

// identity is a caller whose token the gateway verified. Its fields go to
// the master in the signed X-User-* headers.
type identity struct {
	id, name, role string
}

func (i identity) ok() bool { return i.id != "" }

// tokenClaims are the claims of an rlsched token (httpapi's claims): sub is
// the user id, name and role are for clients and this gateway.
type tokenClaims struct {
	Name string `json:"name"`
	Role string `json:"role"`
	jwt.RegisteredClaims
}

// verifier checks tokens: HS256 only (the algorithm is pinned, so "none" and
// RS/ES confusions are refused), signature, expiry required.
//
// A client sends the same token with every request, and parsing it (base64,
// JSON, HMAC) is the costliest filter; so tokens that verified are kept in a
// bounded cache, keyed by their exact bytes, with their expiry (and
// not-before) checked again on every use. Only the result of a successful
// verification is cached: a changed byte is another key.
type verifier struct {
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
	who      identity
	exp, nbf int64 // unix seconds; nbf 0 when absent
}

func newVerifier(secret []byte, now func() time.Time) *verifier {
	v := &verifier{
		secret: secret,
		now:    now,
		seed:   maphash.MakeSeed(),
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
			jwt.WithExpirationRequired(),
			jwt.WithTimeFunc(now),
		),
	}
	for i := range v.shards {
		v.shards[i].m = map[string]cachedToken{}
	}
	return v
}

func (v *verifier) keyFunc(*jwt.Token) (any, error) { return v.secret, nil }

// verify returns the identity of tok, or !ok.
func (v *verifier) verify(tok []byte) (identity, bool) {
	if len(tok) == 0 || len(tok) > maxTokenLen {
		return identity{}, false
	}
	sh := &v.shards[maphash.Bytes(v.seed, tok)%uint64(len(v.shards))]
	now := v.now().Unix()
	sh.mu.RLock()
	c, ok := sh.m[string(tok)]
	sh.mu.RUnlock()
	if ok {
		// jwt's own rule: expired once now is at or past exp.
		if now < c.exp && now >= c.nbf {
			return c.who, true
		}
		return identity{}, false
	}
	var cl tokenClaims
	if _, err := v.parser.ParseWithClaims(string(tok), &cl, v.keyFunc); err != nil {
		return identity{}, false
	}
	id, err := strconv.ParseInt(cl.Subject, 10, 64)
	if err != nil || id <= 0 || !validHeaderValue(cl.Name) || !validHeaderValue(cl.Role) {
		return identity{}, false
	}
	who := identity{id: cl.Subject, name: cl.Name, role: cl.Role}
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

// validHeaderValue refuses what cannot travel in a header (or would make the
// signed message ambiguous).
func validHeaderValue(s string) bool {
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

// requestToken finds the caller's token: Authorization: Bearer, else (on /ws)
// ?token=, else the jwt_token cookie. A malformed Authorization header is no
// token at all (not a fallback to the cookie), as on the master.
func requestToken(ctx *fasthttp.RequestCtx, ws bool) []byte {
	if h := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization); len(h) > 0 {
		const prefix = "bearer "
		if len(h) <= len(prefix) || !bytes.EqualFold(h[:len(prefix)], []byte(prefix)) {
			return nil
		}
		return bytes.TrimSpace(h[len(prefix):])
	}
	if ws {
		if t := ctx.QueryArgs().Peek("token"); len(t) > 0 {
			return t
		}
	}
	return ctx.Request.Header.Cookie(cookieName)
}

// wantsHTML reports a browser navigation: a GET or HEAD that accepts HTML.
func wantsHTML(ctx *fasthttp.RequestCtx) bool {
	if !ctx.IsGet() && !ctx.IsHead() {
		return false
	}
	return bytes.Contains(ctx.Request.Header.Peek(fasthttp.HeaderAccept), []byte("text/html"))
}
