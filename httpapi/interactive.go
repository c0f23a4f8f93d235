package httpapi

import (
	"context"
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// roomForSession is nil when the interactive run t may be queued under
// MAX_INTERACTIVE_GPUS (the GPUs of a user's interactive runs not yet
// ended, this one included), else the answer that says why not: 400 for a
// session asking more than the cap by itself, 409 when the user's other
// sessions hold the rest. Batch runs and sessions without GPUs pass.
// Like roomInQueue, two submissions at once may both pass it.
func (s *Server) roomForSession(ctx context.Context, u core.User, t core.Task) *apiError {
	max := s.cfg.MaxInteractiveGPUs
	if max <= 0 || t.Kind != core.KindInteractive || t.GPUs <= 0 {
		return nil
	}
	if t.GPUs > max {
		return errBadRequest("gpus: an interactive session may have at most %d GPUs on this server (MAX_INTERACTIVE_GPUS); submit a batch run for more", max)
	}
	held := 0
	for _, st := range []core.Status{core.StatusQueued, core.StatusDispatched, core.StatusRunning, core.StatusLost} {
		f := store.Filter{Status: st, User: u.Username, Limit: 500}
		for {
			page, next, err := s.st.ListTasks(ctx, f)
			if err != nil {
				return storeError(err, "interactive sessions")
			}
			for _, o := range page {
				if o.Kind == core.KindInteractive {
					held += o.GPUs
				}
			}
			if next == "" {
				break
			}
			f.Cursor = next
		}
	}
	if held+t.GPUs > max {
		return &apiError{fasthttp.StatusConflict, codeConflict, fmt.Sprintf(
			"your interactive sessions hold or wait for %d GPUs; %d more would pass this server's limit of %d (MAX_INTERACTIVE_GPUS): end one (rlsched cancel ID, or exit its shell) or ask for fewer",
			held, t.GPUs, max)}
	}
	return nil
}
