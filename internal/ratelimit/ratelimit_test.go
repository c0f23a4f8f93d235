package ratelimit

import (
	"context"
	"testing"
	"time"
)

// TestLocal: at most max admissions of a subject in any window, wherever
// its boundaries fall; a charge never passes max; subjects are apart; a
// sweep forgets only idle subjects.
func TestLocal(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := NewLocal(10*time.Second, 3, func() time.Time { return now })
	ctx := context.Background()
	allow := func(subject string, want bool) Decision {
		t.Helper()
		d, err := l.Allow(ctx, subject)
		if err != nil || d.Allowed != want {
			t.Fatalf("at %v, %s: %+v %v, want allowed %v", now, subject, d, err, want)
		}
		return d
	}
	allow("a", true)
	now = now.Add(4 * time.Second)
	if d := allow("a", true); d.Remaining != 1 {
		t.Fatalf("remaining %d, want 1", d.Remaining)
	}
	_ = l.Charge(ctx, "a", 5) // one more fits
	if d := allow("a", false); d.RetryAfter != 6*time.Second {
		t.Fatalf("retry after %v, want 6s (the first admission leaves the window)", d.RetryAfter)
	}
	allow("b", true)
	now = now.Add(6 * time.Second) // the first has left the window
	allow("a", true)
	allow("a", false)
	now = now.Add(20 * time.Second)
	l.Sweep()
	for i := range l.shards {
		if n := len(l.shards[i].logs); n != 0 {
			t.Fatalf("shard %d keeps %d idle subjects after a sweep", i, n)
		}
	}
	allow("a", true)
}
