package dispatch

import (
	"context"
	"errors"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// Cancel implements httpapi.Control.
func (d *Dispatcher) Cancel(ctx context.Context, id string) (core.Task, error) {
	return d.cancelWith(ctx, id, cancelCause{})
}

// cancelCause is why the master itself cancels a run: msg the error it
// ends with instead of "cancelled", reason its core.Task.Reason.
type cancelCause struct{ reason, msg string }

// ErrNotPlacedHere is StopEarly's answer for a run this master does not
// hold: the master that holds it stops it (every master runs the sweep
// controller), so the run's reason and error are written once, by it.
var ErrNotPlacedHere = errors.New("the run is not placed on this master's workers")

// StopEarly stops run id, placed on a worker of this master, for its
// sweep's early stopping, through the one cancel path: SIGTERM, the grace,
// its outputs kept; it ends CANCELLED with reason core.ReasonEarlyStopped
// and error why. ErrNotPlacedHere when another master (or none) holds it;
// core.ErrConflict when it has ended. Safe from any goroutine.
func (d *Dispatcher) StopEarly(ctx context.Context, id, why string) error {
	if !d.reg.placed(id) {
		return ErrNotPlacedHere
	}
	_, err := d.cancelWith(ctx, id, cancelCause{core.ReasonEarlyStopped, why})
	return err
}

// cancelWith is the one cancel path: why, when set, is why the master
// itself cancels the run (instead of "cancelled" by a user).
func (d *Dispatcher) cancelWith(ctx context.Context, id string, why cancelCause) (core.Task, error) {
	msg := "cancelled"
	if why.msg != "" {
		msg = why.msg
	}
	for try := 0; try < 5; try++ {
		t, err := d.st.Task(ctx, id)
		if err != nil {
			return t, err
		}
		switch {
		case t.Status.Terminal():
			return t, core.ErrConflict
		case t.Status == core.StatusQueued || t.Status == core.StatusLost:
			exp := store.Expect{Fence: t.Fence, Status: t.Status}
			if err := t.Cancel(msg, d.now()); err != nil {
				return t, err
			}
			t.Reason = why.reason
			err := d.st.UpdateTask(ctx, &t, exp)
			if errors.Is(err, core.ErrFenced) {
				continue // dispatched meanwhile: cancel it on its worker
			}
			return t, err
		default:
			// Recorded in the store first: the master that holds (or later
			// re-adopts) the run's worker may be another one, or this one
			// after a restart.
			if err := d.st.RequestCancel(ctx, id); err != nil {
				return t, err
			}
			if rr := d.reg.requestCancel(id, why); rr != nil {
				d.resendCancel(rr)
			}
			if d.cfg.OnCancel != nil {
				d.cfg.OnCancel(id)
			}
			return t, nil
		}
	}
	return core.Task{}, core.ErrConflict
}

// resendCancel tells a run's worker to stop it if its cancel was requested.
// A group's cancel goes to every member (group.go).
func (d *Dispatcher) resendCancel(rr *runRec) {
	members := []*runRec{rr}
	if rr.group != nil {
		members = rr.group.members
	}
	for _, m := range members {
		sess := d.reg.cancelTarget(m)
		if sess == nil || m.memberDone.Load() {
			continue
		}
		_ = sess.send(&pb.CancelTask{TaskId: m.taskID, Attempt: int32(m.attempt), Fence: m.fence.Load(),
			Reason: "cancelled by a user", GraceMs: d.cfg.CancelGrace.Milliseconds()})
	}
}

// cancelIdle cancels run id, idle on its GPUs, off the caller's goroutine
// (the shard's), through the normal cancel path: SIGTERM, the grace, the
// outputs uploaded; it ends CANCELLED with error why.
func (d *Dispatcher) cancelIdle(id, why string) {
	go func() {
		ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
		defer cancel()
		if _, err := d.cancelWith(ctx, id, cancelCause{msg: why}); err != nil {
			d.log.Warn().Str("task", id).Err(err).Msg("cannot cancel a run idle on its GPUs")
			return
		}
		d.log.Info().Str("task", id).Msg("cancelling a run: " + why)
	}()
}
