package redis

import (
	"errors"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testsvc"
	"github.com/rlsched/rlsched/lease"
)

// openDetect is open with Options.DetectReset, as masters use it.
func openDetect(t *testing.T) *Leases {
	t.Helper()
	addr := testsvc.RequireRedis(t)
	c := client(t, addr)
	prefix := newPrefix(t, c)
	l, err := Open(t.Context(), addr, Options{Prefix: prefix, DetectReset: true})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestReset: with DetectReset, losing every key (what FLUSHALL or an empty
// restart does to a deployment) makes Claim and Renew answer ErrReset, not
// a low token or ErrLeaseLost, until a rebuild marks the state ready; the
// rebuilt counter continues above the restored tokens.
func TestReset(t *testing.T) {
	l := openDetect(t)
	ctx := t.Context()
	if _, err := l.Claim(ctx, "t1", "w1", time.Minute); !errors.Is(err, lease.ErrReset) {
		t.Fatalf("Claim before MarkReady: %v, want ErrReset", err)
	}
	if err := l.MarkReady(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := l.Claim(ctx, "t1", "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Lose the whole state of the deployment.
	for _, k := range []string{l.k.fence, l.k.leases, l.k.expiry, l.k.presence, l.k.masters, l.k.ready} {
		if err := l.c.Do(ctx, l.c.B().Del().Key(k).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if errs := l.Renew(ctx, []lease.Renewal{{TaskID: "t1", Fence: f}}, time.Minute); !errors.Is(errs[0], lease.ErrReset) {
		t.Fatalf("Renew after the loss: %v, want ErrReset", errs[0])
	}
	if _, err := l.Claim(ctx, "t2", "w1", time.Minute); !errors.Is(err, lease.ErrReset) {
		t.Fatalf("Claim after the loss: %v, want ErrReset", err)
	}
	// The rebuild: counter above the store's highest fence, leases back.
	if err := l.EnsureFenceAbove(ctx, f+10); err != nil {
		t.Fatal(err)
	}
	if err := l.Restore(ctx, "t1", "w1", f, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.MarkReady(ctx); err != nil {
		t.Fatal(err)
	}
	if errs := l.Renew(ctx, []lease.Renewal{{TaskID: "t1", Fence: f}}, time.Minute); errs[0] != nil {
		t.Fatalf("Renew after the rebuild: %v", errs[0])
	}
	f2, err := l.Claim(ctx, "t2", "w1", time.Minute)
	if err != nil || f2 <= f+10 {
		t.Fatalf("Claim after the rebuild: fence %d, %v; want above %d", f2, err, f+10)
	}
	// Many renewals (several scripts) all carry the error.
	if err := l.c.Do(ctx, l.c.B().Del().Key(l.k.ready).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	rs := make([]lease.Renewal, 600)
	for i := range rs {
		rs[i] = lease.Renewal{TaskID: "t1", Fence: f}
	}
	for i, err := range l.Renew(ctx, rs, time.Minute) {
		if !errors.Is(err, lease.ErrReset) {
			t.Fatalf("renewal %d of 600: %v, want ErrReset", i, err)
		}
	}
}
