package httpapi

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestSubmitRateLimit (issue 25): a master limits each user's submissions
// that reach it without the gateway: every path that queues runs takes one
// admission, a sweep's members count, the refusal is 429 rate_limited with
// Retry-After, another user is not held, what the gateway signed is not
// counted twice, and the window moves on.
func TestSubmitRateLimit(t *testing.T) {
	e := newEnvWith(t, func(c *Config) {
		c.SubmitLimitMax, c.SubmitLimitWindow = 3, 10*time.Second
		c.GatewayTrustHeaders, c.GatewaySharedSecret = true, testGatewaySecret
	})
	tok, aliceID := e.user("alice")
	bobTok, _ := e.user("bob")
	first := e.submit(tok, `{"command":["x"]}`)
	// One admission and one member more: the limit's third.
	sweep, _ := e.sweep(tok, `{"base":{"command":["y"]},"grid":{"a":[1,2]}}`)
	for _, c := range []struct{ what, path, body string }{
		{"a submission", "/api/train", `{"command":["x"]}`},
		{"a rerun", "/api/tasks/" + first + "/rerun", ""},
		{"a sweep", "/api/sweeps", `{"base":{"command":["y"]},"grid":{"a":[1]}}`},
		{"a sweep's retry", "/api/sweeps/" + sweep + "/retry", ""},
		{"a pipeline", "/api/pipelines", `{"name":"p","steps":[{"name":"a","command":["x"]}]}`},
		{"a pipeline's retry", "/api/pipelines/p1/retry", ""},
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		r := e.req("POST", c.path, tok, body)
		if r.status != http.StatusTooManyRequests || r.errCode(t) != "rate_limited" {
			t.Errorf("%s past the limit: %d %s, want 429 rate_limited", c.what, r.status, r.body)
			continue
		}
		if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 || s > 10 {
			t.Errorf("%s past the limit: Retry-After %q, want 1..10 s", c.what, r.header.Get("Retry-After"))
		}
		if r.header.Get("X-RateLimit-Limit") != "3" || r.header.Get("X-RateLimit-Remaining") != "0" {
			t.Errorf("%s past the limit: X-RateLimit-Limit %q, -Remaining %q", c.what,
				r.header.Get("X-RateLimit-Limit"), r.header.Get("X-RateLimit-Remaining"))
		}
	}
	if r := e.req("GET", "/api/tasks", tok, nil); r.status != http.StatusOK {
		t.Errorf("a read past the limit: %d %s", r.status, r.body)
	}
	e.submit(bobTok, `{"command":["x"]}`)
	// Through the gateway, which has limited it already.
	body := `{"command":["x"]}`
	if r := e.req("POST", "/api/train", "", body,
		signedBody(testGatewaySecret, "POST", "/api/train", body, "t1", e.clock.Now(), aliceID, "alice", "ADMIN")...); r.status != http.StatusAccepted {
		t.Errorf("a signed submission past the master's limit: %d %s, want 202", r.status, r.body)
	}
	e.clock.Add(10 * time.Second)
	e.submit(tok, `{"command":["x"]}`)
}
