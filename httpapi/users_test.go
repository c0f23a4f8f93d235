package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
)

type adminUser struct {
	ID          int64      `json:"id"`
	Username    string     `json:"username"`
	Role        string     `json:"role"`
	Disabled    bool       `json:"disabled"`
	CreatedAt   time.Time  `json:"createdAt"`
	LastLoginAt *time.Time `json:"lastLoginAt"`
	Runs        int        `json:"runs"`
	ActiveRuns  int        `json:"activeRuns"`
}

func (e *testEnv) users(tok string) map[string]adminUser {
	e.t.Helper()
	r := e.req("GET", "/api/admin/users", tok, nil)
	if r.status != 200 {
		e.t.Fatalf("GET /api/admin/users: %d %s", r.status, r.body)
	}
	var b struct{ Items []adminUser }
	mustJSON(e.t, r.body, &b)
	out := map[string]adminUser{}
	for _, u := range b.Items {
		out[u.Username] = u
	}
	return out
}

// TestAdminUsers: an admin lists users with their runs and last sign-in,
// changes a role, disables (the user's tokens stop at once, sign-in is
// refused) and enables again, resets a password, deletes (the runs stay,
// owned by "deleted user N"); nobody else may; the last admin stays.
func TestAdminUsers(t *testing.T) {
	e := newEnv(t)
	root, _ := e.user("root") // the first: ADMIN
	alice, aliceID := e.user("alice")
	runID := e.submit(alice, `{"command":["a"]}`)

	us := e.users(root)
	if len(us) != 2 || us["root"].Role != "ADMIN" || us["alice"].Role != "USER" || us["alice"].Runs != 1 ||
		us["alice"].LastLoginAt == nil || us["alice"].Disabled || us["alice"].ID != aliceID {
		t.Fatalf("users: %+v", us)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/admin/users", ""}, {"POST", "/api/admin/users", `{"username":"x1x","password":"password-x"}`},
		{"PATCH", "/api/admin/users/root", `{"role":"USER"}`}, {"DELETE", "/api/admin/users/root", ""},
	} {
		if r := e.req(c.method, c.path, alice, c.body); r.status != 403 || r.errCode(t) != "forbidden" {
			t.Fatalf("%s %s by a USER: %d %s", c.method, c.path, r.status, r.body)
		}
		if r := e.req(c.method, c.path, "", c.body); r.status != 401 {
			t.Fatalf("%s %s without a token: %d", c.method, c.path, r.status)
		}
	}

	patch := func(name, body string, want int) adminUser {
		t.Helper()
		r := e.req("PATCH", "/api/admin/users/"+name, root, body)
		if r.status != want {
			t.Fatalf("PATCH %s %s: %d %s, want %d", name, body, r.status, r.body, want)
		}
		var u adminUser
		if want == 200 {
			mustJSON(t, r.body, &u)
		}
		return u
	}
	if u := patch("alice", `{"role":"ADMIN"}`, 200); u.Role != "ADMIN" {
		t.Fatalf("after the role change: %+v", u)
	}
	if r := e.req("GET", "/api/auth/me", alice, nil); r.status != 401 {
		t.Fatalf("a token from before a role change: %d", r.status)
	}
	alice, _ = e.login("alice", "password-alice")
	patch("alice", `{"role":"USER"}`, 200)
	alice, _ = e.login("alice", "password-alice")

	if u := patch("alice", `{"disabled":true}`, 200); !u.Disabled {
		t.Fatalf("after disabling: %+v", u)
	}
	if r := e.req("GET", "/api/tasks", alice, nil); r.status != 403 || !strings.Contains(string(r.body), "disabled") {
		t.Fatalf("a disabled user's token: %d %s", r.status, r.body)
	}
	// A disabled account's sign-in says the same with the right password
	// as with a wrong one: nothing tells a guess right.
	right := e.req("POST", "/api/auth/login", "", map[string]string{"username": "alice", "password": "password-alice"})
	wrong := e.req("POST", "/api/auth/login", "", map[string]string{"username": "alice", "password": "wrong-password"})
	if right.status != 401 || wrong.status != 401 || right.json(t)["error"].(map[string]any)["message"] != wrong.json(t)["error"].(map[string]any)["message"] {
		t.Fatalf("a disabled user's sign-in: right password %d %s, wrong %d %s", right.status, right.body, wrong.status, wrong.body)
	}
	patch("alice", `{"disabled":false}`, 200)
	alice, _ = e.login("alice", "password-alice")

	patch("alice", `{"password":"short"}`, 400)
	patch("alice", `{"password":"`+strings.Repeat("x", 73)+`"}`, 400)
	patch("alice", `{"role":"ROOT"}`, 400)
	patch("alice", `{}`, 400)
	patch("alice", `{"disabled":"yes"}`, 400)
	patch("nobody", `{"disabled":true}`, 404)
	patch("alice", `{"password":"a-new-password"}`, 200)
	if r := e.req("GET", "/api/auth/me", alice, nil); r.status != 401 {
		t.Fatalf("a token from before a password reset: %d", r.status)
	}
	alice, _ = e.login("alice", "a-new-password")

	if r := e.req("PATCH", "/api/admin/users/root", root, `{"role":"USER"}`); r.status != 409 || !strings.Contains(string(r.body), "admin") {
		t.Fatalf("demoting the last admin: %d %s", r.status, r.body)
	}
	if r := e.req("DELETE", "/api/admin/users/root", root, nil); r.status != 409 {
		t.Fatalf("deleting the last admin: %d %s", r.status, r.body)
	}

	if r := e.req("DELETE", "/api/admin/users/alice", root, nil); r.status != 204 {
		t.Fatalf("DELETE alice: %d %s", r.status, r.body)
	}
	if r := e.req("GET", "/api/auth/me", alice, nil); r.status != 401 {
		t.Fatalf("a deleted user's token: %d", r.status)
	}
	if r := e.req("DELETE", "/api/admin/users/alice", root, nil); r.status != 404 {
		t.Fatalf("DELETE alice again: %d", r.status)
	}
	if _, ok := e.users(root)["alice"]; ok {
		t.Fatal("a deleted user is still listed")
	}
	run := e.req("GET", "/api/tasks/"+runID, root, nil).json(t)
	if run["user"] != core.DeletedUsername(aliceID) {
		t.Fatalf("the deleted user's run is owned by %v", run["user"])
	}
	// The name is free again.
	if _, id := e.user("alice"); id == aliceID {
		t.Fatal("a new alice got the deleted one's id")
	}

	r := e.req("POST", "/api/admin/users", root, `{"username":"carol","password":"password-carol","role":"ADMIN"}`)
	if r.status != 201 || r.json(t)["role"] != "ADMIN" {
		t.Fatalf("POST /api/admin/users: %d %s", r.status, r.body)
	}
	e.login("carol", "password-carol")
	if r := e.req("POST", "/api/admin/users", root, `{"username":"carol","password":"password-carol"}`); r.status != 409 {
		t.Fatalf("adding a taken name: %d", r.status)
	}
	if r := e.req("GET", "/api/admin/users/carol", root, nil); r.status != http.StatusMethodNotAllowed ||
		r.header.Get("Allow") != "PATCH, DELETE" {
		t.Fatalf("GET one user: %d Allow %q", r.status, r.header.Get("Allow"))
	}
}

// TestRegistrationModes: closed refuses every registration (admins add
// users); admin takes it, disabled until an admin enables it; open is the
// default.
func TestRegistrationModes(t *testing.T) {
	reg := func(e *testEnv, name string) resp {
		return e.req("POST", "/api/auth/register", "", map[string]string{"username": name, "password": "password-" + name})
	}
	closed := newEnvWith(t, func(c *Config) { c.Registration = RegistrationClosed })
	if r := reg(closed, "root"); r.status != 403 || !strings.Contains(string(r.body), "closed") {
		t.Fatalf("register when closed: %d %s", r.status, r.body)
	}

	e := newEnvWith(t, func(c *Config) { c.Registration = RegistrationAdmin })
	if r := reg(e, "root"); r.status != 201 || r.json(t)["disabled"] != nil {
		t.Fatalf("the first user (an admin) when REGISTRATION=admin: %d %s", r.status, r.body)
	}
	root, _ := e.login("root", "password-root")
	if r := reg(e, "alice"); r.status != 201 || r.json(t)["disabled"] != true {
		t.Fatalf("register when REGISTRATION=admin: %d %s", r.status, r.body)
	}
	if r := e.req("POST", "/api/auth/login", "", map[string]string{"username": "alice", "password": "password-alice"}); r.status != 401 {
		t.Fatalf("sign-in before an admin enabled the account: %d %s", r.status, r.body)
	}
	if r := e.req("PATCH", "/api/admin/users/alice", root, `{"disabled":false}`); r.status != 200 {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	e.login("alice", "password-alice")

	if _, err := New(Config{JWTSecret: testSecret, Registration: "sometimes"}, e.st, e.ctl); err == nil ||
		!strings.Contains(err.Error(), "REGISTRATION") {
		t.Fatalf("New with a bad REGISTRATION: %v", err)
	}
}
