package httpapi

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/rlsched/rlsched/core"
)

// TestStoreErrorStatus: no store error becomes a 500; one that says the
// store cannot be reached, or that is not recognised at all, is a 503
// "unavailable" the client may retry.
func TestStoreErrorStatus(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("cannot read run r1: %w", core.ErrNotFound), 404, codeNotFound},
		{fmt.Errorf("update: %w", core.ErrFenced), 409, codeConflict},
		{fmt.Errorf("cannot read run r1: %w", fmt.Errorf("%w: %w", core.ErrUnavailable, dial)), 503, codeUnavailable},
		{dial, 503, codeUnavailable},
		{errors.New("something else"), 503, codeUnavailable},
	} {
		e := storeError(c.err, "task")
		if e.Status != c.status || e.Code != c.code || e.Message == "" {
			t.Errorf("storeError(%v) = %d %s %q; want %d %s", c.err, e.Status, e.Code, e.Message, c.status, c.code)
		}
	}
}
