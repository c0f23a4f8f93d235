package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/rediskey"
	"github.com/rlsched/rlsched/internal/testkit/testsvc"
	"github.com/rlsched/rlsched/lease"
	"github.com/rlsched/rlsched/lease/leasetest"
)

// client returns a client of the test Redis, closed when t ends.
func client(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("cannot connect to redis at %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// newPrefix returns a key prefix no other test uses, and deletes every key
// under it when t ends. The only SCAN of the package is here.
func newPrefix(t *testing.T, c rueidis.Client) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "rlsched_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, k := range scanKeys(t, ctx, c, prefix) {
			if err := c.Do(ctx, c.B().Del().Key(k).Build()).Error(); err != nil {
				t.Errorf("cannot delete test key %s: %v", k, err)
			}
		}
	})
	return prefix
}

// scanKeys lists the keys under prefix with SCAN.
func scanKeys(t *testing.T, ctx context.Context, c rueidis.Client, prefix string) []string {
	t.Helper()
	var out []string
	cursor := uint64(0)
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(KeyPattern(prefix)).Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatalf("SCAN %s: %v", KeyPattern(prefix), err)
		}
		out = append(out, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			return out
		}
	}
}

// open returns a backend under a fresh prefix, its client and its prefix.
func open(t *testing.T) (*Leases, rueidis.Client, string) {
	t.Helper()
	addr := testsvc.RequireRedis(t)
	c := client(t, addr)
	prefix := newPrefix(t, c)
	l, err := Open(t.Context(), addr, Options{Prefix: prefix})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l, c, prefix
}

// TestConformance runs leasetest on real time. The suite trusts a lease to
// be live only TTL/4 before its expiry by the sum of its sleeps; the real
// time that passes also counts every round trip and sleep overshoot, which
// on a loaded 2-CPU CI machine under -race reached 20–25% of the slept time
// within one lease's life. A TTL of 500ms keeps that drift at well under
// half of the 125ms margin; 200ms was flaky there.
func TestConformance(t *testing.T) {
	leasetest.Run(t, leasetest.Harness{
		New: func(t *testing.T) leasetest.Backend {
			return leasetest.Backend{Leases: openDetect(t), Advance: time.Sleep}
		},
		TTL:         500 * time.Millisecond,
		RandomSteps: 200,
	})
}

// TestKeys: a deployment writes only its five keys, all under its prefix
// with the prefix as hash tag, and none with an expire (volatile-* eviction
// policies must never be able to pick them).
func TestKeys(t *testing.T) {
	l, c, prefix := open(t)
	defer l.Close()
	ctx := t.Context()
	f, err := l.Claim(ctx, "t1", "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if errs := l.Renew(ctx, []lease.Renewal{{TaskID: "t1", Fence: f}}, time.Minute); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if _, err := l.Claim(ctx, "t2", "w1", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // t2's TTL runs on Redis' clock, which no test can advance
	if _, err := l.Reap(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Touch(ctx, "w1", "m1", time.Minute); err != nil {
		t.Fatal(err)
	}
	got := scanKeys(t, ctx, c, prefix)
	slices.Sort(got)
	var want []string
	for _, n := range []string{rediskey.Fence, rediskey.Leases, rediskey.Expiry, rediskey.Presence, rediskey.Masters} {
		want = append(want, "{"+prefix+"}:"+n)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("keys under %s: got %v, want %v", prefix, got, want)
	}
	for _, k := range got {
		if ttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64(); err != nil || ttl != -1 {
			t.Fatalf("PTTL %s = %d, %v; want -1 (no expire)", k, ttl, err)
		}
	}
}

func TestEvictionRule(t *testing.T) {
	f := func(policy string, safe bool) {
		t.Helper()
		if got := evictionSafe(policy); got != safe {
			t.Fatalf("evictionSafe(%q) = %v, want %v", policy, got, safe)
		}
	}
	f("noeviction", true)
	f("volatile-lru", true)
	f("volatile-lfu", true)
	f("volatile-random", true)
	f("volatile-ttl", true)
	f("allkeys-lru", false)
	f("allkeys-lfu", false)
	f("allkeys-random", false)
	f("something-new", false)
	f("", false)
}

// TestEvictionRefused starts a Redis of its own with an allkeys policy (the
// shared one must not have its config changed under other tests) and checks
// that New refuses it and says how to fix it.
func TestEvictionRefused(t *testing.T) {
	addr := testsvc.StartRedis(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru").Addr()
	l, err := Open(t.Context(), addr, Options{Prefix: "x"})
	if err == nil {
		_ = l.Close()
		t.Fatal("Open on an allkeys-lru Redis succeeded, want a refusal")
	}
	for _, want := range []string{"allkeys-lru", "noeviction", "CONFIG SET"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("refusal %q does not mention %q", err, want)
		}
	}
	c := client(t, addr)
	if err := c.Do(t.Context(), c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory-policy", "volatile-lru").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(t.Context(), addr, Options{Prefix: "x"})
	if err != nil {
		t.Fatalf("Open on a volatile-lru Redis: %v", err)
	}
	_ = l.Close()
}

func TestOpenErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	if l, err := Open(t.Context(), dead, Options{}); err == nil {
		_ = l.Close()
		t.Fatal("Open of a dead address succeeded")
	} else if !strings.Contains(err.Error(), "cannot reach redis at "+dead) || !strings.Contains(err.Error(), "scripts/services.sh") {
		t.Fatalf("Open of a dead address: %v", err)
	}
	addr := testsvc.RequireRedis(t)
	for _, p := range []string{"a{b", "a}", "a*", "a b", strings.Repeat("x", 129)} {
		if l, err := Open(t.Context(), addr, Options{Prefix: p}); err == nil {
			_ = l.Close()
			t.Fatalf("Open with prefix %q succeeded", p)
		}
	}
}

// TestLargeFences: tokens above 2^53 (where Lua numbers round) come back
// exact, and the counter refuses what Redis's int64 cannot hold.
func TestLargeFences(t *testing.T) {
	l, _, _ := open(t)
	defer l.Close()
	ctx := t.Context()
	big := uint64(1)<<62 + 12345
	if err := l.EnsureFenceAbove(ctx, big); err != nil {
		t.Fatal(err)
	}
	f, err := l.Claim(ctx, "t1", "w1", time.Minute)
	if err != nil || f != big+1 {
		t.Fatalf("Claim after EnsureFenceAbove(%d) = %d, %v; want %d", big, f, err, big+1)
	}
	if err := l.EnsureFenceAbove(ctx, big-7); err != nil {
		t.Fatal(err)
	}
	if f, _ := l.Claim(ctx, "t2", "w1", time.Minute); f != big+2 {
		t.Fatalf("EnsureFenceAbove lowered the counter: next fence %d, want %d", f, big+2)
	}
	odd := uint64(1)<<53 + 1 // not a float64
	if err := l.Restore(ctx, "t3", "w:with:colons", odd, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := l.Get(ctx, "t3"); err != nil || !ok || got.Fence != odd || got.WorkerID != "w:with:colons" {
		t.Fatalf("Get after Restore(%d) = %+v, %v, %v", odd, got, ok, err)
	}
	if errs := l.Renew(ctx, []lease.Renewal{{TaskID: "t3", Fence: odd - 1}, {TaskID: "t3", Fence: odd}}, time.Minute); !errors.Is(errs[0], core.ErrLeaseLost) || errs[1] != nil {
		t.Fatalf("Renew near 2^53 = %v", errs)
	}
	if err := l.EnsureFenceAbove(ctx, math.MaxInt64+1); err == nil {
		t.Fatal("EnsureFenceAbove(2^63) succeeded")
	}
	if err := l.Restore(ctx, "t4", "w1", math.MaxUint64, time.Minute); err == nil {
		t.Fatal("Restore(2^64-1) succeeded")
	}
}

// TestRenewMany: a heartbeat larger than one script's batch is split, sent
// at once, and every verdict lands on its own renewal.
func TestRenewMany(t *testing.T) {
	l, _, _ := open(t)
	defer l.Close()
	ctx := t.Context()
	const n = 3*renewBatch + 17
	rs := make([]lease.Renewal, n)
	for i := range n {
		task := fmt.Sprint("t", i)
		f, err := l.Claim(ctx, task, "w1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if i%7 == 3 {
			f += 1 << 40 // a wrong token
		}
		rs[i] = lease.Renewal{TaskID: task, Fence: f}
	}
	for i, err := range l.Renew(ctx, rs, time.Hour) {
		if wrong := i%7 == 3; wrong != errors.Is(err, core.ErrLeaseLost) || (!wrong && err != nil) {
			t.Fatalf("renewal %d: %v (wrong token: %v)", i, err, i%7 == 3)
		}
	}
	got, _, err := l.Get(ctx, "t0")
	if err != nil || time.Until(got.Expires) < 50*time.Minute {
		t.Fatalf("t0 after renewal for an hour: expires %v, %v", got.Expires, err)
	}
}

// TestNoScript: after SCRIPT FLUSH (or a Redis restart) every operation
// still works: EVALSHA's NOSCRIPT falls back to EVAL.
func TestNoScript(t *testing.T) {
	l, c, _ := open(t)
	defer l.Close()
	ctx := t.Context()
	f, err := l.Claim(ctx, "t1", "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if errs := l.Renew(ctx, []lease.Renewal{{TaskID: "t1", Fence: f}}, time.Minute); errs[0] != nil {
		t.Fatalf("Renew after SCRIPT FLUSH: %v", errs[0])
	}
	if err := l.Release(ctx, "t1", f); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH: %v", err)
	}
}

// TestPresence: Presence names the master of the last Touch, and Touch
// drops expired presences.
func TestPresence(t *testing.T) {
	l, c, prefix := open(t)
	defer l.Close()
	ctx := t.Context()
	for _, w := range []string{"a", "b", "c"} {
		if err := l.Touch(ctx, w, "m1", 5*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // the TTLs run on Redis' clock, which no test can advance
	if err := l.Touch(ctx, "d", "m2", time.Minute); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Do(ctx, c.B().Zcard().Key(rediskey.Key(prefix, rediskey.Presence)).Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("presence holds %d workers after Touch, %v; want 1", n, err)
	}
	if n, err := c.Do(ctx, c.B().Hlen().Key(rediskey.Key(prefix, rediskey.Masters)).Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("presence masters hold %d workers after Touch, %v; want 1", n, err)
	}
	if m, ok, err := l.Presence(ctx, "d"); err != nil || !ok || m != "m2" {
		t.Fatalf("Presence(d) = %q, %v, %v; want m2", m, ok, err)
	}
	if m, ok, err := l.Presence(ctx, "a"); err != nil || ok || m != "" {
		t.Fatalf("Presence(a) = %q, %v, %v; want absent", m, ok, err)
	}
}

// TestClose: every call fails after Close; a client passed to New stays
// open for its owner.
func TestClose(t *testing.T) {
	addr := testsvc.RequireRedis(t)
	c := client(t, addr)
	prefix := newPrefix(t, c)
	l, err := New(t.Context(), c, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
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
	if _, err := l.Claim(ctx, "t2", "w1", time.Minute); !errors.Is(err, errClosed) {
		t.Fatalf("Claim after Close: %v", err)
	}
	if errs := l.Renew(ctx, []lease.Renewal{{TaskID: "t1", Fence: f}}, time.Minute); !errors.Is(errs[0], errClosed) {
		t.Fatalf("Renew after Close: %v", errs[0])
	}
	if _, err := l.Reap(ctx, 0); !errors.Is(err, errClosed) {
		t.Fatalf("Reap after Close: %v", err)
	}
	if _, err := l.Present(ctx, "w1"); !errors.Is(err, errClosed) {
		t.Fatalf("Present after Close: %v", err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("the caller's client was closed: %v", err)
	}
	// Leases outlive a master: another backend on the prefix still sees it.
	l2, err := New(ctx, c, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if got, ok, err := l2.Get(ctx, "t1"); err != nil || !ok || got.Fence != f {
		t.Fatalf("Get from a second backend = %+v, %v, %v", got, ok, err)
	}
}

func TestCanceledContext(t *testing.T) {
	l, _, _ := open(t)
	defer l.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := l.Claim(ctx, "t1", "w1", time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim with a canceled context: %v", err)
	}
	if _, ok, _ := l.Get(t.Context(), "t1"); ok {
		t.Fatal("a canceled Claim left a lease")
	}
}

// TestPrefixesIsolated: two deployments on one Redis never see each
// other's leases or tokens.
func TestPrefixesIsolated(t *testing.T) {
	a, _, _ := open(t)
	defer a.Close()
	b, _, _ := open(t)
	defer b.Close()
	ctx := t.Context()
	fa, err := a.Claim(ctx, "t1", "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := b.Claim(ctx, "t1", "w2", time.Minute)
	if err != nil || fa != 1 || fb != 1 {
		t.Fatalf("claims of one run id in two prefixes: %d, %d, %v; want 1 and 1", fa, fb, err)
	}
}
