package httpapi

import (
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/crypto/bcrypt"

	"github.com/rlsched/rlsched/internal/signature"
	"github.com/rlsched/rlsched/store/sqlite"
)

var testGatewaySecret = []byte("gateway-secret-0123456789")

// newGatewayEnv is newEnv with the gateway's identity trusted (and required).
func newGatewayEnv(t *testing.T, require bool) *testEnv {
	t.Helper()
	return newEnvWith(t, func(c *Config) {
		c.GatewayTrustHeaders, c.GatewayRequire, c.GatewaySharedSecret = true, require, testGatewaySecret
	})
}

// signed returns the headers a gateway sends for a bodiless request to
// target (path and query) with that identity, signed with secret at ts
// under a nonce of its own.
func signed(secret []byte, method, target, trace string, ts time.Time, id int64, name, role string) []string {
	return signedBody(secret, method, target, "", trace, ts, id, name, role)
}

var nonceSeq atomic.Int64

// signedBody is signed for a request with body.
func signedBody(secret []byte, method, target, body, trace string, ts time.Time, id int64, name, role string) []string {
	return signedAs(secret, method, target, body, "", trace, ts, id, name, role, "192.0.2.7")
}

// signedBodyHost is signedBody for an anonymous request the client sent to
// the gateway under host.
func signedBodyHost(secret []byte, method, target, body, host, trace string, ts time.Time) []string {
	return signedAs(secret, method, target, body, host, trace, ts, 0, "", "", "192.0.2.7")
}

func signedAs(secret []byte, method, target, body, host, trace string, ts time.Time, id int64, name, role, clientIP string) []string {
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.Header.SetRequestURI(target)
	req.SetBodyString(body)
	hdr := []string{"X-Trace-Id", trace, signature.HeaderTimestamp, signature.Timestamp(ts),
		signature.HeaderNonce, "test-" + strconv.FormatInt(nonceSeq.Add(1), 10), signature.HeaderClientIP, clientIP}
	if host != "" {
		hdr = append(hdr, signature.HeaderForwardedHost, host)
	}
	if id != 0 {
		hdr = append(hdr, signature.HeaderUserID, strconv.FormatInt(id, 10), signature.HeaderUserName, name,
			signature.HeaderUserRole, role, signature.HeaderTokenVersion, "0")
	}
	for i := 0; i < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	f := signature.Of(&req)
	return append(hdr, signature.HeaderSignature, signature.NewSigner(secret).Sign(&f))
}

func TestGatewayIdentity(t *testing.T) {
	e := newGatewayEnv(t, false)
	_, aliceID := e.user("alice") // the first user: ADMIN
	bobTok, bobID := e.user("bob")
	me := func(token string, hdr ...string) (int, string) {
		r := e.req("GET", "/api/auth/me", token, nil, hdr...)
		return r.status, string(r.body)
	}
	now := e.clock.Now()

	if st, body := me("", signed(testGatewaySecret, "GET", "/api/auth/me", "t1", now, bobID, "bob", "USER")...); st != 200 || !strings.Contains(body, `"username":"bob"`) {
		t.Fatalf("signed identity: %d %s", st, body)
	}
	// The role comes from the store, not the header.
	if st, body := me("", signed(testGatewaySecret, "GET", "/api/auth/me", "t2", now, aliceID, "alice", "USER")...); st != 200 || !strings.Contains(body, `"role":"ADMIN"`) {
		t.Fatalf("role: %d %s", st, body)
	}

	refused := map[string][]string{
		"wrong secret":    signed([]byte("another-secret-0123456789"), "GET", "/api/auth/me", "t", now, bobID, "bob", "USER"),
		"other path":      signed(testGatewaySecret, "GET", "/api/tasks", "t", now, bobID, "bob", "USER"),
		"other method":    signed(testGatewaySecret, "POST", "/api/auth/me", "t", now, bobID, "bob", "USER"),
		"stale":           signed(testGatewaySecret, "GET", "/api/auth/me", "t", now.Add(-301*time.Second), bobID, "bob", "USER"),
		"future":          signed(testGatewaySecret, "GET", "/api/auth/me", "t", now.Add(301*time.Second), bobID, "bob", "USER"),
		"identity only":   {signature.HeaderUserID, strconv.FormatInt(aliceID, 10), signature.HeaderUserName, "alice", signature.HeaderUserRole, "ADMIN"},
		"identity edited": append(signed(testGatewaySecret, "GET", "/api/auth/me", "t", now, bobID, "bob", "USER"), signature.HeaderUserID, strconv.FormatInt(aliceID, 10), signature.HeaderUserName, "alice"),
	}
	for name, hdr := range refused {
		if st, body := me("", hdr...); st != 401 {
			t.Errorf("%s: %d %s", name, st, body)
		}
		// With a token of its own, the request is the token's user: the
		// headers gain nothing.
		if st, body := me(bobTok, hdr...); st != 200 || !strings.Contains(body, `"username":"bob"`) {
			t.Errorf("%s with bob's token: %d %s", name, st, body)
		}
	}
	// A valid signature over a user this master does not know (deleted, or
	// another store) is refused outright: the gateway vouched for it.
	for name, hdr := range map[string][]string{
		"unknown user":  signed(testGatewaySecret, "GET", "/api/auth/me", "t", now, 999, "ghost", "USER"),
		"name mismatch": signed(testGatewaySecret, "GET", "/api/auth/me", "t", now, bobID, "alice", "USER"),
	} {
		if st, body := me(bobTok, hdr...); st != 401 {
			t.Errorf("%s: %d %s", name, st, body)
		}
	}
	if !strings.Contains(e.logs.String(), "gateway identity refused") {
		t.Error("refused signatures are not logged")
	}
}

func TestGatewayRequired(t *testing.T) {
	e := newGatewayEnv(t, true)
	tok, id := e.user("alice") // public routes stay open
	if r := e.req("GET", "/api/auth/me", tok, nil); r.status != 401 || !strings.Contains(string(r.body), "gateway") {
		t.Fatalf("a token without the gateway: %d %s", r.status, r.body)
	}
	hdr := signed(testGatewaySecret, "GET", "/api/auth/me", "t", e.clock.Now(), id, "alice", "ADMIN")
	if r := e.req("GET", "/api/auth/me", "", nil, hdr...); r.status != 200 {
		t.Fatalf("signed: %d %s", r.status, r.body)
	}
	e.clock.Add(10 * time.Minute)
	if r := e.req("GET", "/api/auth/me", tok, nil, hdr...); r.status != 401 {
		t.Fatalf("stale signature with a token: %d %s", r.status, r.body)
	}
}

func TestGatewayConfig(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "rlsched.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for name, cfg := range map[string]Config{
		"trust without a secret":   {GatewayTrustHeaders: true},
		"require without a secret": {GatewayRequire: true},
		"short secret":             {GatewayTrustHeaders: true, GatewaySharedSecret: []byte("short")},
	} {
		cfg.JWTSecret, cfg.BcryptCost = testSecret, bcrypt.MinCost
		if _, err := New(cfg, st, &testControl{st: st}); err == nil || !strings.Contains(err.Error(), "GATEWAY_SHARED_SECRET") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestGatewaySignatureCoversQueryBodyNonce (issue 12): a signature is good
// for one request: not again (the nonce), not with another query, not with
// another body.
func TestGatewaySignatureCoversQueryBodyNonce(t *testing.T) {
	e := newGatewayEnv(t, false)
	_, bobID := e.user("bob")
	now := e.clock.Now()

	hdr := signed(testGatewaySecret, "GET", "/api/tasks?limit=5", "t1", now, bobID, "bob", "USER")
	if r := e.req("GET", "/api/tasks?limit=5", "", nil, hdr...); r.status != 200 {
		t.Fatalf("signed: %d %s", r.status, r.body)
	}
	if r := e.req("GET", "/api/tasks?limit=5", "", nil, hdr...); r.status != 401 {
		t.Fatalf("the same signed request again: %d %s", r.status, r.body)
	}
	if !strings.Contains(e.logs.String(), "used before") {
		t.Error("a replay is not logged as one")
	}
	hdr = signed(testGatewaySecret, "GET", "/api/tasks?limit=5", "t2", now, bobID, "bob", "USER")
	if r := e.req("GET", "/api/tasks?limit=500", "", nil, hdr...); r.status != 401 {
		t.Fatalf("another query: %d %s", r.status, r.body)
	}

	body := `{"command":["true"]}`
	hdr = signedBody(testGatewaySecret, "POST", "/api/train", body, "t3", now, bobID, "bob", "USER")
	hdr = append(hdr, "Content-Type", "application/json")
	if r := e.req("POST", "/api/train", "", `{"command":["rm","-rf","/"]}`, hdr...); r.status != 401 {
		t.Fatalf("another body: %d %s", r.status, r.body)
	}
	hdr = signedBody(testGatewaySecret, "POST", "/api/train", body, "t4", now, bobID, "bob", "USER")
	hdr = append(hdr, "Content-Type", "application/json")
	if r := e.req("POST", "/api/train", "", body, hdr...); r.status != 202 {
		t.Fatalf("the signed body: %d %s", r.status, r.body)
	}
}
