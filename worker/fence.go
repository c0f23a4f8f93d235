package worker

import (
	"context"
	"os"
	"syscall"
	"time"

	"github.com/rlsched/rlsched/internal/backoff"
	"github.com/rlsched/rlsched/worker/leaseguard"
)

// sentAt is when a renewal (a Hello or a Heartbeat) left: on the process's
// monotonic clock, which orders it against the start of runs, and on
// leaseguard.Now, from which its lease deadline counts.
type sentAt struct {
	at   time.Time
	boot time.Duration
}

func sentNow() sentAt { return sentAt{at: time.Now(), boot: leaseguard.Now()} }

// fenceLoop enforces self-fencing until ctx is done: when no renewal has
// been acked for a whole lease TTL, counted from the send time of the last
// acked one, the master has reaped the leases and may have given the runs to
// another worker, so every running run is SIGKILLed and forgotten at once
// (no report: the master already counts them LOST). Runs that already ended
// and wait for their TaskFinishedAck are kept; they execute nothing, and the
// master decides on reconnect whether it still wants their report.
//
// This is the second line: the guard process kills each run's group at its
// deadline even when this process is frozen (worker/leaseguard).
func (a *agent) fenceLoop(ctx context.Context) {
	for {
		if !backoff.Sleep(ctx, a.tab.fenceEvery()) {
			return
		}
		a.tab.selfFence(leaseguard.Now())
	}
}

// killedBySIGKILL reports whether a process ended by SIGKILL.
func killedBySIGKILL(ps *os.ProcessState) bool {
	if ps == nil {
		return false
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
