package leasetest

import (
	"errors"
	"testing"
)

// claim claims task for worker with the harness TTL and fails the test on
// error.
func (h Harness) claim(t *testing.T, b Backend, task, worker string) uint64 {
	t.Helper()
	f, err := b.Claim(t.Context(), task, worker, h.TTL)
	if err != nil {
		t.Fatalf("Claim(%q, %q): %v", task, worker, err)
	}
	return f
}

// wantIs fails the test unless errors.Is(err, target); a nil target wants
// a nil err.
func wantIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if target == nil && err != nil {
		t.Fatalf("%s: unexpected error %v", what, err)
	}
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

// wantLease fails the test unless task has a live lease of worker with
// fence.
func wantLease(t *testing.T, b Backend, task, worker string, fence uint64) {
	t.Helper()
	l, ok, err := b.Get(t.Context(), task)
	if err != nil {
		t.Fatalf("Get(%q): %v", task, err)
	}
	if !ok || l.TaskID != task || l.WorkerID != worker || l.Fence != fence {
		t.Fatalf("Get(%q) = %+v, %v; want worker %q fence %d", task, l, ok, worker, fence)
	}
}

// wantNoLease fails the test if task has a live lease.
func wantNoLease(t *testing.T, b Backend, task string) {
	t.Helper()
	l, ok, err := b.Get(t.Context(), task)
	if err != nil {
		t.Fatalf("Get(%q): %v", task, err)
	}
	if ok {
		t.Fatalf("Get(%q) = %+v; want no live lease", task, l)
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
