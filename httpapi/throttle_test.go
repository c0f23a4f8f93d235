package httpapi

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLoginThrottled (issues 12, 25): 5 failed sign-ins a minute for one
// user from one address, and the next from there is 429 with Retry-After,
// even with the right password; 20 for one user from anywhere, or from one
// address for anyone, likewise, except for a user signing in from an
// address they signed in from before: nobody can lock a user out of it,
// nor lock out an address its users share. The window slides.
func TestLoginThrottled(t *testing.T) {
	e := newGatewayEnv(t, false)
	e.user("alice") // each signs in once, from the test's own address
	e.user("bob")
	e.user("carol")
	from := func(name, pw, ip string) resp {
		t.Helper()
		body := `{"username":"` + name + `","password":"` + pw + `"}`
		return e.req("POST", "/api/auth/login", "", body, signedLogin(body, ip, e.clock.Now())...)
	}
	const a = "198.51.100.1"
	for i := 0; i < 5; i++ {
		if r := from("alice", "wrong-password", a); r.status != 401 {
			t.Fatalf("failure %d: %d %s", i+1, r.status, r.body)
		}
	}
	r := from("alice", "password-alice", a)
	if r.status != 429 || r.errCode(t) != "rate_limited" {
		t.Fatalf("the 6th sign-in: %d %s", r.status, r.body)
	}
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	// The pair is throttled, not alice nor the address: alice from another
	// address, and bob from this one, sign in.
	if r := from("alice", "password-alice", "198.51.100.2"); r.status != 200 {
		t.Fatalf("alice from another address: %d %s", r.status, r.body)
	}
	if r := from("bob", "password-bob", a); r.status != 200 {
		t.Fatalf("bob from the failing address: %d %s", r.status, r.body)
	}

	// 20 failures for alice from 20 addresses: alice is throttled from a
	// new address, but not from one she signed in from.
	for i := 0; i < 20; i++ {
		if r := from("alice", "wrong-password", "203.0.113."+strconv.Itoa(i+1)); r.status != 401 {
			t.Fatalf("spread failure %d: %d %s", i+1, r.status, r.body)
		}
	}
	if r := from("alice", "password-alice", "192.0.2.77"); r.status != 429 {
		t.Fatalf("alice from a new address after 20 failures: %d %s", r.status, r.body)
	}
	if r := from("alice", "password-alice", "198.51.100.2"); r.status != 200 {
		t.Fatalf("alice from her own address after 20 failures elsewhere: %d %s", r.status, r.body)
	}

	// 20 failures from one address (unknown users, sprayed): the address is
	// throttled for carol, who never signed in there; bob, who did, goes on.
	for i := 0; i < 20; i++ {
		if r := from("nobody"+strconv.Itoa(i), "whatever1", a); r.status != 401 && r.status != 429 {
			t.Fatalf("unknown user %d: %d", i, r.status)
		}
	}
	if r := from("carol", "password-carol", a); r.status != 429 {
		t.Fatalf("carol from a sprayed address: %d %s", r.status, r.body)
	}
	if r := from("bob", "password-bob", a); r.status != 200 {
		t.Fatalf("bob from the sprayed address he signs in from: %d %s", r.status, r.body)
	}

	e.clock.Add(61 * time.Second)
	if r := from("alice", "password-alice", a); r.status != 200 {
		t.Fatalf("after the window: %d %s", r.status, r.body)
	}
	if r := from("carol", "password-carol", a); r.status != 200 {
		t.Fatalf("carol after the window: %d %s", r.status, r.body)
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
