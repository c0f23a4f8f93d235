package e2e

import (
	"strconv"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// TestDirectSubmissionsRateLimited (issue 25): a master process limits a
// user's submissions sent straight to its port as the gateway does (a
// sweep's members counted, 429 rate_limited with Retry-After, per user),
// and what comes through the gateway in front of it is not refused twice.
func TestDirectSubmissionsRateLimited(t *testing.T) {
	b := newBed(t)
	shared := "e2e-shared-" + rig.RandHex(16)
	m := b.StartMaster("master", rig.MasterOpts{Env: []string{"GATEWAY_SHARED_SECRET=" + shared, "GATEWAY_TRUST_HEADERS=true",
		"RATE_LIMIT_ENABLED=true", "RATE_LIMIT_MAX_REQUESTS=3", "RATE_LIMIT_WINDOW_SECONDS=60"}})
	gp := b.Start("gateway", b.ServerEnv("JWT_SECRET="+b.JWTSecret, "GATEWAY_SHARED_SECRET="+shared), "gateway",
		"--masters", m.URL, "--gateway-port", strconv.Itoa(rig.FreePort(t)),
		"--rate-limit-enabled=true", "--rate-limit-max-requests=100", "--rate-limit-window-seconds=60")
	gwURL := gp.WaitLog(t, 30*time.Second, `"gateway started"`, func(l logLine) bool { return l.Msg() == "gateway started" }).Str("url")

	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	bob, _ := signup(t, m.URL, "bob", "USER")
	run := map[string]any{"command": []string{"true"}}
	alice.Must("POST", "/api/train", run, 202, nil)
	// Its second admission, and its second member the third.
	alice.Must("POST", "/api/sweeps", map[string]any{"base": run, "grid": map[string]any{"seed": []int{1, 2}}}, 202, nil)
	r, err := alice.Do("POST", "/api/train", run)
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	r.JSON(t, &e)
	if r.Status != 429 || e.Error.Code != "rate_limited" || e.Error.Message == "" {
		t.Fatalf("the fourth run straight to the master: %s, want 429 rate_limited", r)
	}
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
		t.Errorf("Retry-After %q, want 1..60 s", r.Header.Get("Retry-After"))
	}
	bob.Must("POST", "/api/train", run, 202, nil)
	// The gateway limits what it forwards (100 here); the master does not
	// count it again.
	viaGW := newClient(t, gwURL).as(alice.Token)
	for i := 0; i < 4; i++ {
		viaGW.Must("POST", "/api/train", run, 202, nil)
	}
}
