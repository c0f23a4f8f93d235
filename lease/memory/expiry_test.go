package memory

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestExpirySetRandom drives an expirySet with random puts, removes and
// pops against a plain map, checking after each step that the heap indexes
// are consistent and that popExpired yields exactly the expired keys,
// earliest first.
func TestExpirySetRandom(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 7))
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	s := newExpirySet[int]()
	model := map[string]int{} // key → deadline in seconds
	for step := range 20_000 {
		key := string(rune('a' + rnd.IntN(26)))
		switch op := rnd.IntN(10); {
		case op < 6:
			d := rnd.IntN(1000)
			s.put(key, d, at(d))
			model[key] = d
		case op < 8:
			_, had := model[key]
			if got := s.remove(key); got != had {
				t.Fatalf("step %d: remove(%q) = %v, want %v", step, key, got, had)
			}
			delete(model, key)
		default:
			now := rnd.IntN(1000)
			var want []int
			for _, d := range model {
				if d <= now {
					want = append(want, d)
				}
			}
			slices.Sort(want)
			var got []int
			for {
				e, ok := s.popExpired(at(now))
				if !ok {
					break
				}
				if e.val != model[e.key] {
					t.Fatalf("step %d: popped %q with value %d, want %d", step, e.key, e.val, model[e.key])
				}
				got = append(got, e.val)
				delete(model, e.key)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: popExpired(%d) = %v, want %v", step, now, got, want)
			}
		}
		checkHeap(t, &s, len(model))
	}
}

func checkHeap[V any](t *testing.T, s *expirySet[V], n int) {
	t.Helper()
	if s.len() != n || len(s.order) != n {
		t.Fatalf("set has %d keys and %d heap entries, want %d", s.len(), len(s.order), n)
	}
	for i, e := range s.order {
		if e.index != i || s.byKey[e.key] != e {
			t.Fatalf("heap entry %d (%q) has index %d or is not in the map", i, e.key, e.index)
		}
		if i > 0 && e.expires.Before(s.order[(i-1)/2].expires) {
			t.Fatalf("heap entry %d expires before its parent", i)
		}
	}
}

// Touch drops expired presence entries, so workers that vanished without
// Forget do not accumulate.
func TestTouchPrunesPresence(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l := New(WithClock(func() time.Time { return now }))
	for _, w := range []string{"a", "b", "c"} {
		if err := l.Touch(ctx, w, "m", time.Second); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(time.Minute)
	if err := l.Touch(ctx, "d", "m", time.Second); err != nil {
		t.Fatal(err)
	}
	if n := l.presence.len(); n != 1 {
		t.Fatalf("presence holds %d workers after Touch, want 1", n)
	}
}
