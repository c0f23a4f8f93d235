package httpapi

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// The rules a session's app is held to (issue 34): its redirects stay on
// this site under its path, its cookies are scoped to its path.
func TestAppLocation(t *testing.T) {
	const base, site = "/sessions/r1/", "rl.example:8080"
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"/sessions/r1/lab", "/sessions/r1/lab", true},
		{"/sessions/r1", "/sessions/r1", true},
		{"/login?next=/x", "/sessions/r1/login?next=/x", true},
		{"/sessions/r2/steal", "/sessions/r1/sessions/r2/steal", true},
		{"lab/tree", "lab/tree", true},
		{"http://rl.example:8080/sessions/r1/x", "/sessions/r1/x", true},
		{"https://evil.example/", "", false},
		{"//evil.example/x", "", false},
		{"javascript:alert(1)", "", false},
		{"http://rl.example:9090/", "", false},
	} {
		got, ok := appLocation(c.in, base, site)
		if ok != c.ok || got != c.want {
			t.Errorf("appLocation(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestAppResponseScopesCookies(t *testing.T) {
	var resp fasthttp.Response
	resp.Header.Add("Set-Cookie", "a=1; Domain=rl.example; Path=/")
	resp.Header.Add("Set-Cookie", "jwt_token=evil; Path=/sessions/r1/")
	resp.Header.Add("Set-Cookie", "b=2; Path=/sessions/r1/lab; HttpOnly")
	resp.Header.Add("Set-Cookie", "c=3")
	if e := appResponse(&resp, "r1", "rl.example"); e != nil {
		t.Fatal(e)
	}
	got := map[string]string{}
	resp.Header.VisitAllCookie(func(k, v []byte) { got[string(k)] = string(v) })
	if _, ok := got["jwt_token"]; ok || len(got) != 3 {
		t.Fatalf("cookies %v: want a, b and c, never jwt_token", got)
	}
	for k, v := range got {
		if strings.Contains(strings.ToLower(v), "domain=") || !strings.Contains(v, "path=/sessions/r1/") {
			t.Errorf("cookie %s = %q escapes /sessions/r1/", k, v)
		}
	}
	if !strings.Contains(got["b"], "path=/sessions/r1/lab") || !strings.Contains(strings.ToLower(got["b"]), "httponly") {
		t.Errorf("a cookie already under the app's path changed: %q", got["b"])
	}
	resp.Reset()
	resp.Header.Set("Location", "https://evil.example/")
	if e := appResponse(&resp, "r1", "rl.example"); e == nil || e.Status != 502 {
		t.Fatalf("an off-site redirect: %v, want 502", e)
	}
}
