package worker

import (
	"context"
	"time"
)

// fenceLoop enforces self-fencing until ctx is done: when no renewal has
// been acked for a whole lease TTL, counted from the send time of the last
// acked one, the master has reaped the leases and may have given the runs to
// another worker, so every running run is SIGKILLed and forgotten at once
// (no report: the master already counts them LOST). Runs that already ended
// and wait for their TaskFinishedAck are kept; they execute nothing, and the
// master decides on reconnect whether it still wants their report.
func (a *agent) fenceLoop(ctx context.Context) {
	for {
		a.mu.Lock()
		every := min(max(a.leaseTTL/20, 10*time.Millisecond), 500*time.Millisecond)
		a.mu.Unlock()
		if !sleepCtx(ctx, every) {
			return
		}
		a.selfFence(time.Now())
	}
}

// selfFence kills the running runs when the lease TTL has passed since the
// last acked renewal.
func (a *agent) selfFence(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.leaseTTL <= 0 || a.lastRenewal.IsZero() {
		return
	}
	since := now.Sub(a.lastRenewal)
	if since <= a.leaseTTL {
		return
	}
	var killed []string
	for _, r := range a.runs {
		if r.fin != nil {
			continue
		}
		a.forgetLocked(r, true)
		killed = append(killed, r.id)
	}
	if len(killed) > 0 {
		a.log.Error().Strs("tasks", killed).Dur("since_last_renewal", since).Dur("lease_ttl", a.leaseTTL).
			Msg("self-fencing: no lease renewal acked for a whole lease TTL; killed the runs (they may run elsewhere by now)")
	}
}
