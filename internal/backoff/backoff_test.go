package backoff

import (
	"context"
	"testing"
	"time"
)

func TestDelayDoublesToMaxWithinJitter(t *testing.T) {
	b := Backoff{Min: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	for i, want := range []time.Duration{10, 20, 40, 80, 80, 80} {
		want *= time.Millisecond
		d := b.Delay()
		if lo, hi := time.Duration(float64(want)*0.8), time.Duration(float64(want)*1.2); d < lo || d > hi {
			t.Fatalf("delay %d = %v, want %v ±20%%", i, d, want)
		}
	}
	b.Reset()
	if d := b.Delay(); d > 12*time.Millisecond {
		t.Fatalf("after Reset: %v, want the minimum again", d)
	}
}

func TestNoJitter(t *testing.T) {
	b := Backoff{Min: time.Second, Max: 3 * time.Second, Jitter: -1}
	for _, want := range []time.Duration{1, 2, 3, 3} {
		if d := b.Delay(); d != want*time.Second {
			t.Fatalf("got %v, want %v", d, want*time.Second)
		}
	}
}

func TestZeroValueDefaults(t *testing.T) {
	var b Backoff
	for i, w := range []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000} {
		w *= time.Millisecond
		if d := b.Delay(); d < w*8/10 || d > w*12/10 {
			t.Fatalf("delay %d = %s, want %s ±20%%", i, d, w)
		}
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep reported the hour elapsed on a cancelled context")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep of 1 ms did not elapse")
	}
}
