package httpapi

import (
	"net/http"
	"testing"
)

// TestRegisterRefusesLookalikes (issue 25): a name that reads as a user's
// who exists is refused on both paths that make users (registration and
// an admin's add): another case of it (409), and names of dots or dashes
// at an edge, non-ASCII look-alikes (Cyrillic, fullwidth letters), and
// invisible characters (400). "boss" itself stays boss's.
func TestRegisterRefusesLookalikes(t *testing.T) {
	e := newEnv(t)
	root, _ := e.user("root")
	e.user("boss")
	for _, c := range []struct {
		name string
		want int
	}{
		{"Boss", http.StatusConflict},
		{"BOSS", http.StatusConflict},
		{"boss", http.StatusConflict},
		{"...", http.StatusBadRequest},
		{"boss.", http.StatusBadRequest},
		{".boss", http.StatusBadRequest},
		{"-boss", http.StatusBadRequest},
		{"boss_", http.StatusBadRequest},
		{"b\u043ess", http.StatusBadRequest},      // Cyrillic о
		{"\uff42oss", http.StatusBadRequest},      // fullwidth ｂ
		{"bo\u200bss", http.StatusBadRequest},     // zero-width space
		{"boss\u202e", http.StatusBadRequest},     // right-to-left override
		{"B\u0307oss", http.StatusBadRequest},     // combining dot
		{"bo\u017f\u017f", http.StatusBadRequest}, // long s, which folds to s
	} {
		body := map[string]string{"username": c.name, "password": "longenough"}
		if r := e.req("POST", "/api/auth/register", "", body); r.status != c.want {
			t.Errorf("register %q beside boss: %d %s, want %d", c.name, r.status, r.body, c.want)
		}
		if r := e.req("POST", "/api/admin/users", root, body); r.status != c.want {
			t.Errorf("an admin adds %q beside boss: %d %s, want %d", c.name, r.status, r.body, c.want)
		}
	}
	if users := e.users(root); len(users) != 2 {
		t.Errorf("users after the look-alikes: %v, want root and boss", users)
	}
}
