package auth

import (
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"
)

var secret = []byte("auth-test-secret-0123456789")

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestIssueVerify(t *testing.T) {
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	tk := NewTokens(secret, c.Now)
	who := Identity{UserID: 7, Name: "alice", Role: "USER", Version: 3}
	tok, err := tk.Issue(who, c.Now(), c.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second answer comes from the cache
		got, ok := tk.Verify([]byte(tok))
		if !ok || got != who {
			t.Fatalf("Verify = %+v, %v; want %+v", got, ok, who)
		}
	}
	// Expiry is judged on every use, cached or not.
	c.add(time.Hour)
	if _, ok := tk.Verify([]byte(tok)); ok {
		t.Fatal("an expired token verified from the cache")
	}
	if _, ok := NewTokens(secret, c.Now).Verify([]byte(tok)); ok {
		t.Fatal("an expired token verified")
	}
}

func TestVerifyRefuses(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tk := NewTokens(secret, func() time.Time { return now })
	sign := func(m jwt.SigningMethod, key any, c jwt.MapClaims) []byte {
		t.Helper()
		s, err := jwt.NewWithClaims(m, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return []byte(s)
	}
	good := func() jwt.MapClaims {
		return jwt.MapClaims{"sub": "7", "name": "alice", "role": "USER", "exp": now.Add(time.Hour).Unix()}
	}
	with := func(k string, v any) jwt.MapClaims {
		c := good()
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	f := func(name string, tok []byte) {
		t.Helper()
		if who, ok := tk.Verify(tok); ok {
			t.Errorf("%s: verified as %+v", name, who)
		}
	}
	f("empty", nil)
	f("garbage", []byte("not.a.token"))
	f("too long", make([]byte, MaxTokenLen+1))
	f("alg none", sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good()))
	f("HS512", sign(jwt.SigningMethodHS512, secret, good()))
	f("other secret", sign(jwt.SigningMethodHS256, []byte("another-secret-0123456789"), good()))
	f("no expiry", sign(jwt.SigningMethodHS256, secret, with("exp", nil)))
	f("expired", sign(jwt.SigningMethodHS256, secret, with("exp", now.Unix())))
	f("not yet valid", sign(jwt.SigningMethodHS256, secret, with("nbf", now.Add(time.Minute).Unix())))
	f("sub not a number", sign(jwt.SigningMethodHS256, secret, with("sub", "alice")))
	f("sub zero", sign(jwt.SigningMethodHS256, secret, with("sub", "0")))
	f("negative version", sign(jwt.SigningMethodHS256, secret, with("ver", -1)))
	if _, ok := tk.Verify(sign(jwt.SigningMethodHS256, secret, good())); !ok {
		t.Fatal("the good token was refused")
	}
}

func TestHeaderSafe(t *testing.T) {
	for s, want := range map[string]bool{"alice": true, "ADMIN": true, "": false, "a b": false,
		"a\nb": false, "é": false, string(make([]byte, 129)): false} {
		if got := HeaderSafe(s); got != want {
			t.Errorf("HeaderSafe(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestFromRequest(t *testing.T) {
	f := func(name, uri string, headers map[string]string, query bool, want string, wantSrc Source) {
		t.Helper()
		var req fasthttp.Request
		req.SetRequestURI(uri)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		tok, src := FromRequest(&req, query)
		if string(tok) != want || src != wantSrc {
			t.Errorf("%s: got %q from %d, want %q from %d", name, tok, src, want, wantSrc)
		}
	}
	cookie := CookieName + "=c"
	f("nothing", "/ws", nil, true, "", None)
	f("bearer", "/x", map[string]string{"Authorization": "Bearer b", "Cookie": cookie}, false, "b", Bearer)
	f("bearer any case", "/x", map[string]string{"Authorization": "bEaReR  b "}, false, "b", Bearer)
	f("malformed header: no fallback to the cookie", "/x", map[string]string{"Authorization": "Basic b", "Cookie": cookie}, false, "", Bearer)
	f("bare bearer", "/x", map[string]string{"Authorization": "Bearer"}, false, "", Bearer)
	f("cookie", "/x?token=q", map[string]string{"Cookie": cookie}, false, "c", Cookie)
	f("query before cookie", "/ws?token=q", map[string]string{"Cookie": cookie}, true, "q", Query)
	f("bearer before query", "/ws?token=q", map[string]string{"Authorization": "Bearer b"}, true, "b", Bearer)
}
