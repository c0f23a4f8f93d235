package httpapi

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLoginThrottled (issue 12): 5 failed sign-ins a minute for one user,
// or from one address, and the next is 429 with Retry-After, even with the
// right password; the window slides.
func TestLoginThrottled(t *testing.T) {
	e := newGatewayEnv(t, false)
	e.user("alice")
	e.user("bob")
	login := func(name, pw string, hdr ...string) resp {
		t.Helper()
		return e.req("POST", "/api/auth/login", "", map[string]string{"username": name, "password": pw}, hdr...)
	}
	for i := 0; i < 5; i++ {
		if r := login("alice", "wrong-password"); r.status != 401 {
			t.Fatalf("failure %d: %d %s", i+1, r.status, r.body)
		}
	}
	r := login("alice", "password-alice")
	if r.status != 429 || r.errCode(t) != "rate_limited" {
		t.Fatalf("the 6th sign-in: %d %s", r.status, r.body)
	}
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	// Per user: alice is throttled from anywhere; bob from another address
	// is not.
	if r := e.req("POST", "/api/auth/login", "", `{"username":"alice","password":"password-alice"}`,
		signedLogin(`{"username":"alice","password":"password-alice"}`, "198.51.100.1", e.clock.Now())...); r.status != 429 {
		t.Fatalf("alice from another address: %d %s", r.status, r.body)
	}
	if r := e.req("POST", "/api/auth/login", "", `{"username":"bob","password":"password-bob"}`,
		signedLogin(`{"username":"bob","password":"password-bob"}`, "198.51.100.1", e.clock.Now())...); r.status != 200 {
		t.Fatalf("bob from another address: %d %s", r.status, r.body)
	}
	// Per address: this one failed 5 times (alice's), so bob is throttled
	// from it too; a wrong password from elsewhere does not add to it.
	if r := login("bob", "password-bob"); r.status != 429 {
		t.Fatalf("bob from the failing address: %d %s", r.status, r.body)
	}
	e.clock.Add(61 * time.Second)
	if r := login("alice", "password-alice"); r.status != 200 {
		t.Fatalf("after the window: %d %s", r.status, r.body)
	}
	// Unknown users count against the address.
	for i := 0; i < 5; i++ {
		body := `{"username":"nobody` + strconv.Itoa(i) + `","password":"whatever1"}`
		if r := e.req("POST", "/api/auth/login", "", body, signedLogin(body, "203.0.113.9", e.clock.Now())...); r.status != 401 {
			t.Fatalf("unknown user %d: %d", i, r.status)
		}
	}
	body := `{"username":"bob","password":"password-bob"}`
	if r := e.req("POST", "/api/auth/login", "", body, signedLogin(body, "203.0.113.9", e.clock.Now())...); r.status != 429 {
		t.Fatalf("after 5 unknown users from one address: %d %s", r.status, r.body)
	}
	if !strings.Contains(e.logs.String(), "sign-in throttled") {
		t.Error("throttling is not logged")
	}
}

// signedLogin is what a gateway forwards for a login of body from ip.
func signedLogin(body, ip string, now time.Time) []string {
	hdr := signedAs(testGatewaySecret, "POST", "/api/auth/login", body, "", "tl-"+ip, now, 0, "", "", ip)
	return append(hdr, "Content-Type", "application/json")
}

// TestLoginLongPassword (issue 12): over bcrypt's 72 bytes is refused at
// login as at register, saying the limit, and is no failed attempt.
func TestLoginLongPassword(t *testing.T) {
	e := newEnv(t)
	e.user("alice")
	long := strings.Repeat("p", 73)
	for i := 0; i < 6; i++ {
		r := e.req("POST", "/api/auth/login", "", map[string]string{"username": "alice", "password": long})
		if r.status != 400 || r.errCode(t) != "bad_request" || !strings.Contains(string(r.body), "72 bytes") {
			t.Fatalf("a 73-byte password: %d %s", r.status, r.body)
		}
	}
	if r := e.req("POST", "/api/auth/login", "", map[string]string{"username": "alice", "password": "password-alice"}); r.status != 200 {
		t.Fatalf("the right password after long ones: %d %s", r.status, r.body)
	}
}
