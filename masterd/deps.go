package masterd

import (
	"context"
	"sync/atomic"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/depctl"
)

// depSink hands the store's events to the dependency controller, which is
// made after the store it hears (it writes through it): events before it
// exists are decided by its first pass (depctl.Controller.Run).
type depSink struct {
	c atomic.Pointer[depctl.Controller]
}

func (s *depSink) TaskChanged(t core.Task) {
	if c := s.c.Load(); c != nil {
		c.TaskChanged(t)
	}
}

func (s *depSink) WorkerChanged(core.WorkerInfo) {}

// startDeps starts the dependency controller on the published store: a
// run it releases goes into this master's queue page (and wakes its
// scheduler) and, as an event, to the other masters' schedulers and the
// dashboards.
func (m *Master) startDeps(events core.EventSink) {
	c := depctl.New(depctl.Config{Store: m.st, Log: m.cfg.Logger.With().Str("component", "depctl").Logger(),
		Released: func(t core.Task) {
			m.disp.Queued(t)
			events.TaskChanged(t)
		}})
	m.depSink.c.Store(c)
	m.depctl = c
	var ctx context.Context
	ctx, m.noDeps = context.WithCancel(context.Background())
	m.depsDone = make(chan struct{})
	go func() { defer close(m.depsDone); c.Run(ctx) }()
}

// stopDeps stops it (before the dispatcher and the store it writes to).
func (m *Master) stopDeps() {
	if m.noDeps != nil {
		m.noDeps()
		<-m.depsDone
	}
}
