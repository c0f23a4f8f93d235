package dispatch

import (
	"sync"
	"sync/atomic"

	"github.com/rlsched/rlsched/codec/pb"
)

// Flow control of a connection's output after a "busy" refusal.
//
// When the writer's queue is full the master answers the frame "busy" with
// its offset X, and the worker rewinds that run to X and pauses. The frames
// it sent behind X are still on their way (up to its credit window); taking
// them would only make gaps (the file stops at X), and refusing each of them
// again would tell the worker "busy" once per frame. So the continuation of
// the refused frame (the next offsets of the same run, frame after frame) is
// dropped without an answer until the run's output comes again from X or
// before (the resend), or from anywhere else. Dropping is safe because the
// worker no longer counts those bytes as sent: it rewound to X.
//
// One exception: when the file already holds more than X (the refused frame
// repeated bytes an earlier frame brought), the worker goes on from the acked
// offset, not from X, and those frames must not be dropped. So the session
// remembers, per run, the highest offset acked, and an ack past X ends the
// dropping; both take the flow's mutex, so an ack cannot slip between them.

// logFlow is a session's per-run flow state. Its map is bounded by the runs
// a worker holds at once; runs that ended are dropped when it grows.
type logFlow struct {
	mu      sync.Mutex
	runs    map[string]*runFlow
	refused atomic.Int32 // runs with refused set, so frames skip the lock when none
}

type runFlow struct {
	attempt   int32
	acked     uint64 // highest offset acked to the worker on this connection
	refused   bool   // dropping the continuation of a "busy" frame
	refusedAt uint64 // that frame's offset
	next      uint64 // offset the continuation is at
	dropped   int64  // frames dropped since the refusal, for tests
}

const logFlowMaxRuns = 1024

// get returns the run's state for attempt, fresh when the attempt changed.
// Caller holds mu.
func (f *logFlow) get(task string, attempt int32) *runFlow {
	r := f.runs[task]
	if r == nil {
		if f.runs == nil {
			f.runs = map[string]*runFlow{}
		}
		if len(f.runs) >= logFlowMaxRuns {
			for id, o := range f.runs {
				if !o.refused {
					delete(f.runs, id)
				}
			}
		}
		r = &runFlow{attempt: attempt}
		f.runs[task] = r
	}
	if r.attempt != attempt {
		f.clearLocked(r)
		*r = runFlow{attempt: attempt}
	}
	return r
}

func (f *logFlow) clearLocked(r *runFlow) {
	if r.refused {
		r.refused = false
		f.refused.Add(-1)
	}
}

// drop reports whether ld continues a frame refused "busy" and is to be
// dropped unanswered. Event loop.
func (f *logFlow) drop(ld *pb.LogData) bool {
	if f.refused.Load() == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.runs[ld.TaskId]
	if r == nil || !r.refused {
		return false
	}
	if r.attempt == ld.Attempt && ld.Offset == r.next && ld.Offset > r.refusedAt {
		r.next += uint64(len(ld.Data))
		r.dropped++
		return true
	}
	f.clearLocked(r) // the resend, or output from elsewhere: taken as usual
	return false
}

// busy records that ld was refused "busy". Event loop.
func (f *logFlow) busy(ld *pb.LogData) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.get(ld.TaskId, ld.Attempt)
	if r.acked > ld.Offset {
		return // the worker goes on from the acked offset, past this frame
	}
	if !r.refused {
		r.refused = true
		f.refused.Add(1)
	}
	r.refusedAt, r.next, r.dropped = ld.Offset, ld.Offset+uint64(len(ld.Data)), 0
}

// acked records an ack about to go to the worker. Writer goroutines.
func (f *logFlow) acked(task string, attempt int, offset uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.get(task, int32(attempt))
	r.acked = max(r.acked, offset)
	if r.refused && offset > r.refusedAt {
		f.clearLocked(r)
	}
}
