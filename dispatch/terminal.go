package dispatch

import (
	"fmt"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/gpuwatch"
	"github.com/rlsched/rlsched/terminal"
)

// The master's side of interactive runs' terminals (issue 34): TermData
// and TermAck from a run's worker go into its session of package terminal
// (on the connection's event loop: neither blocks), and what viewers type
// or resize goes to the worker that holds the run now (termSender).

// Terminal returns the terminal of interactive run id, placed on a worker
// of this master and started; ErrNotPlacedHere otherwise (not placed here,
// or not yet started). Permission and the run's kind and status are the
// caller's to check. Safe from any goroutine.
func (d *Dispatcher) Terminal(id string) (*terminal.Session, error) {
	rr := d.reg.run(id)
	if rr == nil || rr.fence.Load() == 0 {
		return nil, ErrNotPlacedHere
	}
	return d.terms.Session(id, int32(rr.attempt), rr.fence.Load(), termSender{d: d, rr: rr}), nil
}

// onTermData takes a run's terminal output. On the event loop.
func (d *Dispatcher) onTermData(sess *session, m *pb.TermData) {
	rr := sess.run(m.TaskId)
	if !rr.reports(sess.workerID, m.Attempt, m.Fence) {
		return // a stale attempt's screen: nobody is shown it
	}
	d.terms.Session(m.TaskId, m.Attempt, m.Fence, termSender{d: d, rr: rr}).Output(m.Offset, m.Data)
}

// onTermAck takes a worker's input ack. On the event loop.
func (d *Dispatcher) onTermAck(sess *session, m *pb.TermAck) {
	rr := sess.run(m.TaskId)
	if !rr.reports(sess.workerID, m.Attempt, m.Fence) {
		return
	}
	if s := d.terms.Lookup(m.TaskId); s != nil && s.Attempt() == m.Attempt && s.Fence() == m.Fence {
		s.Ack(m.Offset)
	}
}

// termSender sends a session's input and window size to the worker that
// holds its run, on its connection of the moment.
type termSender struct {
	d  *Dispatcher
	rr *runRec
}

func (s termSender) Input(off uint64, data []byte) error {
	sess := s.d.reg.sessionOf(s.rr)
	if sess == nil {
		return errNoSession
	}
	return sess.send(&pb.TermInput{TaskId: s.rr.taskID, Attempt: int32(s.rr.attempt), Fence: s.rr.fence.Load(),
		Offset: off, Data: data})
}

func (s termSender) Resize(cols, rows uint32) error {
	sess := s.d.reg.sessionOf(s.rr)
	if sess == nil {
		return errNoSession
	}
	return sess.send(&pb.TermResize{TaskId: s.rr.taskID, Attempt: int32(s.rr.attempt), Fence: s.rr.fence.Load(),
		Cols: cols, Rows: rows})
}

// idleSessions ends the interactive runs among running (sess's, from its
// newest GPU sample) whose GPUs have been idle for InteractiveIdle (the GPU
// watch's idle stretch) and whose terminal got no input as long: a notice
// in the terminal, then the one cancel path (SIGTERM, the grace). On the
// session's shard goroutine, after the watch observed the sample.
func (d *Dispatcher) idleSessions(sess *session, running []gpuwatch.Run) {
	idle := d.cfg.InteractiveIdle
	runs := sess.runs.Load()
	if idle <= 0 || runs == nil {
		return
	}
	now := d.now()
	for _, r := range running {
		rr := (*runs)[r.ID]
		if rr == nil {
			continue
		}
		if v := rr.view.Load(); v == nil || v.Kind != core.KindInteractive {
			continue
		}
		since, ok := sess.watch.IdleSince(r.ID)
		if !ok || now.Sub(since) < idle {
			continue
		}
		ts := d.terms.Session(r.ID, int32(rr.attempt), rr.fence.Load(), termSender{d: d, rr: rr})
		if last := ts.LastInput(); !last.IsZero() && now.Sub(last) < idle || !ts.MarkIdleEnd() {
			continue
		}
		why := fmt.Sprintf("interactive session idle: no input and idle GPUs for %s (INTERACTIVE_IDLE_MINUTES)", idle)
		ts.Notice("\r\n[rlsched] " + why + "; it ends now.\r\n")
		d.cancelIdle(r.ID, why)
	}
}
