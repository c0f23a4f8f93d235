package core

import "errors"

// Typed errors shared by stores, leases and the API. Wrap them with context
// and test with errors.Is.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	// ErrFenced means the writer no longer owns the run: its fencing token or
	// the expected status did not match, so nothing was written.
	ErrFenced = errors.New("fenced: ownership lost")
	// ErrLeaseHeld means a claim found the run already leased.
	ErrLeaseHeld = errors.New("lease already held")
	// ErrLeaseLost means a renewal or release found no lease with that token.
	ErrLeaseLost = errors.New("lease lost")
	// ErrUnavailable means a backend (the store, the lease service) could not
	// be reached: nothing was done, and the same call may succeed later.
	// Callers retry with backoff; the API answers 503.
	ErrUnavailable = errors.New("unavailable")
)
