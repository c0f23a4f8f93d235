package leasetest

import "testing"

func testPresence(t *testing.T, h Harness) {
	ctx := t.Context()
	b := h.open(t)
	present := func(w string, want bool) {
		t.Helper()
		got, err := b.Present(ctx, w)
		if err != nil || got != want {
			t.Fatalf("Present(%q) = %v, %v; want %v", w, got, err, want)
		}
	}
	present("w1", false)
	wantIs(t, "Touch", b.Touch(ctx, "w1", "m1", h.TTL), nil)
	present("w1", true)
	h.after(b, 0.6)
	wantIs(t, "Touch again", b.Touch(ctx, "w1", "m1", h.TTL), nil)
	h.after(b, 0.6) // past the first TTL, inside the second
	present("w1", true)
	h.after(b, 0.6)
	present("w1", false)

	// A worker that comes back is present again; Forget ends it at once.
	wantIs(t, "Touch after expiry", b.Touch(ctx, "w1", "m2", h.TTL), nil)
	wantIs(t, "Touch w2", b.Touch(ctx, "w2", "m2", h.TTL), nil)
	present("w1", true)
	wantIs(t, "Forget", b.Forget(ctx, "w1"), nil)
	present("w1", false)
	present("w2", true)
	wantIs(t, "Forget of an absent worker", b.Forget(ctx, "w1"), nil)

	if err := b.Touch(ctx, "w3", "m1", 0); err == nil {
		t.Fatal("Touch with ttl 0 succeeded, want an error")
	}
	present("w3", false)
}
