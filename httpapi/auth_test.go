package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

func TestNew_Failure(t *testing.T) {
	ctl := &testControl{}
	if _, err := New(Config{JWTSecret: []byte("short-secret")}, newEnv(t).st, ctl); err == nil {
		t.Fatal("New accepted a JWT secret under 16 bytes")
	}
}

func TestAuth_RegisterLoginMeLogout(t *testing.T) {
	e := newEnv(t)

	r := e.req("POST", "/api/auth/register", "", map[string]string{"username": "root", "password": "rootroot"})
	if r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	if m := r.json(t); m["role"] != "ADMIN" || m["username"] != "root" || m["id"] == nil {
		t.Fatalf("first user should be ADMIN: %s", r.body)
	}
	r = e.req("POST", "/api/auth/register", "", map[string]string{"username": "alice", "password": "alicealice", "role": "ADMIN"})
	if r.status != http.StatusCreated || r.json(t)["role"] != "USER" {
		t.Fatalf("second user should be USER: %d %s", r.status, r.body)
	}
	r = e.req("POST", "/api/auth/register", "", map[string]string{"username": "alice", "password": "otherpassword"})
	if r.status != http.StatusConflict || r.errCode(t) != "conflict" {
		t.Fatalf("duplicate: %d %s", r.status, r.body)
	}

	r = e.req("POST", "/api/auth/login", "", map[string]string{"username": "alice", "password": "alicealice"})
	if r.status != http.StatusOK {
		t.Fatalf("login: %d %s", r.status, r.body)
	}
	var login struct {
		Token     string `json:"token"`
		ExpiresAt string `json:"expiresAt"`
		User      struct {
			ID       int64  `json:"id"`
			Username string `json:"username"`
			Role     string `json:"role"`
		} `json:"user"`
	}
	mustJSON(t, r.body, &login)
	exp, err := time.Parse(time.RFC3339, login.ExpiresAt)
	if err != nil || exp.Sub(e.clock.Now()) < 23*time.Hour || exp.Sub(e.clock.Now()) > 25*time.Hour {
		t.Fatalf("expiresAt %q not about 24h ahead (%v)", login.ExpiresAt, err)
	}
	if login.User.Username != "alice" || login.User.Role != "USER" || login.Token == "" {
		t.Fatalf("login body: %s", r.body)
	}
	cookie := r.header.Get("Set-Cookie")
	for _, want := range []string{"jwt_token=" + login.Token, "HttpOnly", "SameSite=Strict", "path=/"} {
		if !strings.Contains(strings.ToLower(cookie), strings.ToLower(want)) {
			t.Fatalf("cookie %q lacks %q", cookie, want)
		}
	}
	// The token's claims: sub, name, role, exp, iat.
	var c jwt.MapClaims
	if _, err := jwt.ParseWithClaims(login.Token, &c, func(*jwt.Token) (any, error) { return testSecret, nil }); err != nil {
		t.Fatalf("token does not verify: %v", err)
	}
	if c["sub"] != strconv.FormatInt(login.User.ID, 10) || c["name"] != "alice" || c["role"] != "USER" || c["iat"] == nil || c["exp"] == nil {
		t.Fatalf("claims: %v", c)
	}

	r = e.req("GET", "/api/auth/me", login.Token, nil)
	if r.status != http.StatusOK || r.json(t)["username"] != "alice" {
		t.Fatalf("me: %d %s", r.status, r.body)
	}
	// Cookie instead of the header.
	r = e.req("GET", "/api/auth/me", "", nil, "Cookie", "jwt_token="+login.Token)
	if r.status != http.StatusOK || r.json(t)["username"] != "alice" {
		t.Fatalf("me by cookie: %d %s", r.status, r.body)
	}

	r = e.req("POST", "/api/auth/logout", "", nil)
	if r.status != http.StatusNoContent {
		t.Fatalf("logout: %d %s", r.status, r.body)
	}
	if c := r.header.Get("Set-Cookie"); !strings.Contains(c, "jwt_token=;") || !strings.Contains(strings.ToLower(c), "expires=") {
		t.Fatalf("logout does not clear the cookie: %q", c)
	}

	r = e.req("POST", "/api/auth/login", "", map[string]string{"username": "alice", "password": "wrongpassword"})
	if r.status != http.StatusUnauthorized || r.errCode(t) != "unauthorized" {
		t.Fatalf("wrong password: %d %s", r.status, r.body)
	}
	r = e.req("POST", "/api/auth/login", "", map[string]string{"username": "nobody", "password": "whatever1"})
	if r.status != http.StatusUnauthorized {
		t.Fatalf("unknown user: %d %s", r.status, r.body)
	}
	r = e.req("POST", "/api/auth/login", "", map[string]string{"username": "../x", "password": "whatever1"})
	if r.status != http.StatusUnauthorized {
		t.Fatalf("malformed username at login: %d %s", r.status, r.body)
	}
}

func TestAuth_RegisterBadInput(t *testing.T) {
	e := newEnv(t)
	f := func(body string, wantField string) {
		t.Helper()
		r := e.req("POST", "/api/auth/register", "", body)
		if r.status != http.StatusBadRequest || r.errCode(t) != "bad_request" {
			t.Fatalf("register %s: %d %s", body, r.status, r.body)
		}
		if !strings.Contains(string(r.body), wantField) {
			t.Fatalf("register %s: message should name %q: %s", body, wantField, r.body)
		}
	}
	f(`{"username":"ab","password":"longenough"}`, "username")
	f(`{"username":"has space","password":"longenough"}`, "username")
	f(`{"username":"`+strings.Repeat("a", 33)+`","password":"longenough"}`, "username")
	f(`{"username":"../etc","password":"longenough"}`, "username")
	f(`{"username":"bob","password":"short"}`, "password")
	f(`{"username":"bob","password":"`+strings.Repeat("p", 73)+`"}`, "password")
	f(`{"username":"bob"}`, "password")
	f(`{"username":7,"password":"longenough"}`, "username")
	f(`{"username":"bob","password":["x"]}`, "password")
	f(`{"username":"bob",`, "malformed")
	f(`[1,2]`, "object")
	f(``, "malformed")
}

func TestAuth_TokenFailures(t *testing.T) {
	e := newEnv(t)
	_, _ = e.user("root")
	tok, id := e.user("alice")

	sign := func(m jwt.SigningMethod, key any, c jwt.MapClaims) string {
		t.Helper()
		s, err := jwt.NewWithClaims(m, c).SignedString(key)
		if err != nil {
			t.Fatalf("cannot sign: %v", err)
		}
		return s
	}
	now := e.clock.Now()
	good := jwt.MapClaims{"sub": strconv.FormatInt(id, 10), "name": "alice", "role": "USER",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	noExp := jwt.MapClaims{"sub": strconv.FormatInt(id, 10), "iat": now.Unix()}
	ghost := jwt.MapClaims{"sub": "999999", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	adminClaim := jwt.MapClaims{"sub": strconv.FormatInt(id, 10), "role": "ADMIN", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}

	if r := e.req("GET", "/api/auth/me", sign(jwt.SigningMethodHS256, testSecret, good), nil); r.status != http.StatusOK {
		t.Fatalf("a well-formed HS256 token was refused: %d %s", r.status, r.body)
	}
	// A forged ADMIN role claim changes nothing: the role comes from the store.
	if r := e.req("GET", "/api/auth/me", sign(jwt.SigningMethodHS256, testSecret, adminClaim), nil); r.json(t)["role"] != "USER" {
		t.Fatalf("role taken from the token: %s", r.body)
	}

	tampered := tok[:len(tok)-2] + map[bool]string{true: "AA", false: "BB"}[!strings.HasSuffix(tok, "AA")]
	parts := strings.Split(tok, ".")
	f := func(name, token string, hdr ...string) {
		t.Helper()
		r := e.req("GET", "/api/auth/me", token, nil, hdr...)
		if r.status != http.StatusUnauthorized || r.errCode(t) != "unauthorized" {
			t.Fatalf("%s: want 401, got %d %s", name, r.status, r.body)
		}
	}
	f("no token", "")
	f("garbage", "not.a.token")
	f("tampered signature", tampered)
	f("tampered payload", parts[0]+"."+strings.TrimRight(parts[1], "=")+"x."+parts[2])
	f("alg none", sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good))
	f("HS512", sign(jwt.SigningMethodHS512, testSecret, good))
	f("other secret", sign(jwt.SigningMethodHS256, []byte("another-secret-0123456789"), good))
	f("no expiry", sign(jwt.SigningMethodHS256, testSecret, noExp))
	f("unknown user", sign(jwt.SigningMethodHS256, testSecret, ghost))
	f("bad cookie", "", "Cookie", "jwt_token="+tampered)
	f("basic auth", "", "Authorization", "Basic YWxpY2U6cHc=")
	f("huge token", strings.Repeat("a", 10000))

	// Expiry, by moving the server's clock past the token's 24h.
	if r := e.req("GET", "/api/auth/me", tok, nil); r.status != http.StatusOK {
		t.Fatalf("fresh token refused: %d", r.status)
	}
	e.clock.Add(25 * time.Hour)
	f("expired", tok)
}

func TestPublicAndProtectedPaths(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"/api/auth/me", "/api/tasks", "/api/tasks/r1", "/api/workers", "/api/monitor/logs/r1", "/api/tasks/r1/metrics"} {
		if r := e.req("GET", p, "", nil); r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
			t.Fatalf("GET %s without token: %d %s", p, r.status, r.body)
		}
	}
	for _, p := range []string{"/api/train", "/api/tasks/r1/cancel", "/api/tasks/r1/rerun"} {
		if r := e.req("POST", p, "", `{}`); r.status != http.StatusUnauthorized {
			t.Fatalf("POST %s without token: %d %s", p, r.status, r.body)
		}
	}
	if r := e.req("GET", "/api/monitor/health", "", nil); r.status != http.StatusOK {
		t.Fatalf("health should be public: %d %s", r.status, r.body)
	}
	if r := e.req("GET", "/metrics", "", nil); r.status != http.StatusOK || !strings.Contains(string(r.body), "rlsched_build_info") {
		t.Fatalf("/metrics should be public: %d %.200s", r.status, r.body)
	}
}

func TestAccessLog(t *testing.T) {
	e := newEnv(t)
	r := e.req("GET", "/api/monitor/health", "", nil, "X-Trace-Id", "log-trace-1")
	if r.status != http.StatusOK {
		t.Fatalf("health: %d", r.status)
	}
	line := ""
	for _, l := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(l, `"traceId":"log-trace-1"`) {
			line = l
		}
	}
	for _, want := range []string{`"method":"GET"`, `"path":"/api/monitor/health"`, `"status":200`, `"duration":`} {
		if !strings.Contains(line, want) {
			t.Fatalf("access log line %q lacks %s", line, want)
		}
	}
}

// TestLogoutRevokes (issue 12): logout ends the token it was sent with, by
// bearer or by cookie, and through the gateway; a change of role ends every
// token of the user. A new login works at once.
func TestLogoutRevokes(t *testing.T) {
	e := newGatewayEnv(t, false)
	e.user("root")
	tok, id := e.user("alice")
	me := func(tok string, hdr ...string) int {
		t.Helper()
		return e.req("GET", "/api/auth/me", tok, nil, hdr...).status
	}
	other, _ := e.login("alice", "password-alice") // a second sign-in, elsewhere
	if s := me(tok); s != 200 {
		t.Fatalf("before logout: %d", s)
	}
	if r := e.req("POST", "/api/auth/logout", tok, nil); r.status != 204 {
		t.Fatalf("logout: %d %s", r.status, r.body)
	}
	if s := me(tok); s != 401 {
		t.Fatalf("the token after its logout: %d", s)
	}
	if s := me(other); s != 401 {
		t.Fatalf("another token of the user after a logout: %d", s)
	}
	// Through the gateway: the signed identity carries the token's version.
	if s := me("", signed(testGatewaySecret, "GET", "/api/auth/me", "g1", e.clock.Now(), id, "alice", "USER")...); s != 401 {
		t.Fatalf("a gateway-signed identity of version 0 after the logout: %d", s)
	}

	// By cookie, as the dashboard does.
	tok, _ = e.login("alice", "password-alice")
	cookie := []string{"Cookie", "jwt_token=" + tok, "Content-Type", "application/json", "Origin", e.url}
	if s := me("", cookie...); s != 200 {
		t.Fatalf("by cookie before logout: %d", s)
	}
	if r := e.req("POST", "/api/auth/logout", "", nil, cookie...); r.status != 204 {
		t.Fatalf("logout by cookie: %d %s", r.status, r.body)
	}
	if s := me("", cookie...); s != 401 {
		t.Fatalf("the cookie after its logout: %d", s)
	}
	// Logout without a (valid) token still clears the cookie.
	if r := e.req("POST", "/api/auth/logout", tok, nil); r.status != 204 {
		t.Fatalf("logout with a revoked token: %d %s", r.status, r.body)
	}

	// A change of role ends the tokens issued before it.
	tok, _ = e.login("alice", "password-alice")
	admin := core.RoleAdmin
	if _, err := e.st.UpdateUser(t.Context(), id, store.UserPatch{Role: &admin}); err != nil {
		t.Fatal(err)
	}
	if s := me(tok); s != 401 {
		t.Fatalf("a token from before a role change: %d", s)
	}
	tok, _ = e.login("alice", "password-alice")
	if r := e.req("GET", "/api/auth/me", tok, nil); r.status != 200 || r.json(t)["role"] != "ADMIN" {
		t.Fatalf("after signing in again: %d %s", r.status, r.body)
	}
}

// TestChangePassword: a user changes their own password with the current
// one; every token from before is revoked, this browser's cookie is
// replaced, and the new password signs in. A wrong current password is
// 403 and is throttled as a sign-in is; a weak new one is 400 naming it.
func TestChangePassword(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	other, _ := e.login("alice", "password-alice")
	cookie := []string{"Cookie", "jwt_token=" + tok, "Content-Type", "application/json", "Origin", e.url}
	put := func(body string, hdr ...string) resp {
		t.Helper()
		return e.req("PUT", "/api/auth/me/password", "", json.RawMessage(body), hdr...)
	}
	if r := put(`{"current":"password-alice","new":"short"}`, cookie...); r.status != 400 || !strings.Contains(string(r.body), "new: password must be at least") {
		t.Fatalf("a short new password: %d %s", r.status, r.body)
	}
	if r := put(`{"current":"nope-nope-nope","new":"a-new-password"}`, cookie...); r.status != 403 || !strings.Contains(string(r.body), "current:") {
		t.Fatalf("a wrong current password: %d %s", r.status, r.body)
	}
	r := put(`{"current":"password-alice","new":"a-new-password"}`, cookie...)
	if r.status != 200 {
		t.Fatalf("change: %d %s", r.status, r.body)
	}
	var fresh string
	for _, c := range r.header.Values("Set-Cookie") {
		if v, ok := strings.CutPrefix(c, "jwt_token="); ok {
			fresh, _, _ = strings.Cut(v, ";")
		}
	}
	if fresh == "" || fresh == tok {
		t.Fatalf("no new session cookie: %v", r.header.Values("Set-Cookie"))
	}
	for name, old := range map[string]string{"the changing sign-in's old token": tok, "another sign-in's": other} {
		if s := e.req("GET", "/api/auth/me", old, nil).status; s != 401 {
			t.Errorf("%s after the change: %d; want 401", name, s)
		}
	}
	if s := e.req("GET", "/api/auth/me", fresh, nil).status; s != 200 {
		t.Errorf("the new cookie's token: %d", s)
	}
	e.login("alice", "a-new-password") // fails the test unless it signs in
	// A token for scripts, from the browser's session.
	tr := e.req("POST", "/api/auth/me/token", fresh, nil)
	var tk struct {
		Token string `json:"token"`
	}
	if tr.status != 200 || json.Unmarshal(tr.body, &tk) != nil || e.req("GET", "/api/auth/me", tk.Token, nil).status != 200 {
		t.Fatalf("a token for scripts: %d %s", tr.status, tr.body)
	}
	// Guessing the current password is throttled as guessing at the login is.
	fc := []string{"Cookie", "jwt_token=" + fresh, "Content-Type", "application/json", "Origin", e.url}
	var last resp
	for range 20 {
		if last = put(`{"current":"guess-guess-guess","new":"another-password"}`, fc...); last.status == 429 {
			break
		}
	}
	if last.status != 429 {
		t.Fatalf("20 wrong current passwords: the last %d %s; want 429", last.status, last.body)
	}
}
