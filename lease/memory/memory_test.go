package memory_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/rlsched/rlsched/lease"
	"github.com/rlsched/rlsched/lease/leasetest"
	"github.com/rlsched/rlsched/lease/memory"
)

func newBackend(t *testing.T) leasetest.Backend {
	c := leasetest.NewClock()
	return leasetest.Backend{Leases: memory.New(memory.WithClock(c.Now)), Advance: c.Advance}
}

func TestConformance(t *testing.T) {
	leasetest.Run(t, leasetest.Harness{New: newBackend, TTL: time.Minute, RandomSteps: 5000, ExactClock: true})
}

func TestKind(t *testing.T) {
	if k := memory.New().Kind(); k != "memory" {
		t.Fatalf("Kind() = %q", k)
	}
}

// Reap hands out the leases that expired first before later ones, so a
// limited reaper works through a backlog in order.
func TestReapEarliestFirst(t *testing.T) {
	ctx := t.Context()
	c := leasetest.NewClock()
	l := memory.New(memory.WithClock(c.Now))
	for i := range 5 {
		if _, err := l.Claim(ctx, fmt.Sprint("t", i), "w", time.Duration(10-i)*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	c.Advance(time.Minute)
	got, err := l.Reap(ctx, 0)
	if err != nil || len(got) != 5 {
		t.Fatalf("Reap = %+v, %v", got, err)
	}
	for i, g := range got {
		if want := fmt.Sprint("t", 4-i); g.TaskID != want {
			t.Fatalf("Reap[%d] = %q, want %q (earliest expiry first)", i, g.TaskID, want)
		}
	}
}

// A counter at its maximum refuses to claim rather than wrap to a used token.
func TestFenceExhausted(t *testing.T) {
	ctx := t.Context()
	l := memory.New()
	if err := l.EnsureFenceAbove(ctx, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	if f, err := l.Claim(ctx, "t1", "w1", time.Minute); err == nil {
		t.Fatalf("Claim at the counter's maximum = fence %d, want an error", f)
	}
}

func TestCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	l := memory.New()
	if _, err := l.Claim(ctx, "t1", "w1", time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim with a canceled context: %v", err)
	}
	if err := l.Touch(ctx, "w1", "m1", time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("Touch with a canceled context: %v", err)
	}
	if _, ok, _ := l.Get(t.Context(), "t1"); ok {
		t.Fatal("a canceled Claim left a lease")
	}
}

func TestClose(t *testing.T) {
	ctx := t.Context()
	l := memory.New()
	f, err := l.Claim(ctx, "t1", "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.Claim(ctx, "t2", "w1", time.Minute); err == nil {
		t.Fatal("Claim after Close succeeded")
	}
	if errs := l.Renew(ctx, []lease.Renewal{{TaskID: "t1", Fence: f}}, time.Minute); errs[0] == nil {
		t.Fatal("Renew after Close succeeded")
	}
	if _, err := l.Reap(ctx, 0); err == nil {
		t.Fatal("Reap after Close succeeded")
	}
	if _, err := l.Present(ctx, "w1"); err == nil {
		t.Fatal("Present after Close succeeded")
	}
}

// BenchmarkReapNoneExpired shows that a reaper pass over many live leases
// costs the same as over few: the heap never scans them.
func BenchmarkReapNoneExpired(b *testing.B) {
	for _, n := range []int{100, 100_000} {
		b.Run(fmt.Sprint(n, "live"), func(b *testing.B) {
			ctx := b.Context()
			l := memory.New()
			for i := range n {
				if _, err := l.Claim(ctx, fmt.Sprint("t", i), "w", time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if got, _ := l.Reap(ctx, 100); len(got) != 0 {
					b.Fatal("reaped a live lease")
				}
			}
		})
	}
}

// BenchmarkRenew measures one heartbeat renewing 8 leases among 10,000,
// from parallel goroutines contending for the one mutex.
func BenchmarkRenew(b *testing.B) {
	ctx := b.Context()
	l := memory.New()
	rs := make([]lease.Renewal, 0, 8)
	for i := range 10_000 {
		f, err := l.Claim(ctx, fmt.Sprint("t", i), "w", time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		if i < 8 {
			rs = append(rs, lease.Renewal{TaskID: fmt.Sprint("t", i), Fence: f})
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			for _, err := range l.Renew(ctx, rs, time.Hour) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// TestConformanceRealTime runs the suite the way a Redis backend will: on
// the wall clock, with Advance sleeping. It checks that the suite itself
// holds on real time; it takes a few seconds, so -short skips it.
func TestConformanceRealTime(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps for a few seconds")
	}
	leasetest.Run(t, leasetest.Harness{
		New: func(t *testing.T) leasetest.Backend {
			return leasetest.Backend{Leases: memory.New(), Advance: time.Sleep}
		},
		TTL:         100 * time.Millisecond,
		RandomSteps: 200,
	})
}
