package gateway_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/gateway"
)

// A session's web app (issue 34) may take longer than an API call over its
// answer: /sessions/ paths wait past UpstreamTimeout, the API does not; a
// non-Bearer Authorization there is the app's and passes with the cookie.
func TestSessionAppPaths(t *testing.T) {
	up := upstream(t, func(ctx *fasthttp.RequestCtx) {
		time.Sleep(700 * time.Millisecond)
		ctx.SetBodyString("auth=" + string(ctx.Request.Header.Peek("Authorization")))
	})
	_, gwURL := startGW(t, gateway.Config{UpstreamTimeout: 200 * time.Millisecond, HealthInterval: time.Hour, FallbackDisabled: true}, []string{up}, nil)
	tok := testToken(t, 1, "alice", "USER")
	get := func(path string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", gwURL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get("/api/tasks", "Authorization", "Bearer "+tok); st != http.StatusGatewayTimeout {
		t.Fatalf("a slow API answer: %d %s; want 504", st, body)
	}
	if st, body := get("/sessions/r1/slow", "Authorization", "Bearer "+tok); st != 200 {
		t.Fatalf("a slow app answer: %d %s; want 200", st, body)
	}
	if st, body := get("/sessions/r1/", "Authorization", "token app-secret", "Cookie", "jwt_token="+tok); st != 200 || body != "auth=token app-secret" {
		t.Fatalf("the app's own Authorization with the cookie: %d %s", st, body)
	}
	if st, _ := get("/api/tasks", "Authorization", "token app-secret", "Cookie", "jwt_token="+tok); st != http.StatusUnauthorized {
		t.Fatalf("a non-Bearer Authorization on the API: %d; want 401", st)
	}
}
