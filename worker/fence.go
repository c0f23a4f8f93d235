package worker

import (
	"context"
	"os"
	"syscall"
	"time"

	"github.com/rlsched/rlsched/internal/backoff"

	"golang.org/x/sys/unix"
)

// Lease deadlines are kept on CLOCK_BOOTTIME. It is one clock for the whole
// machine, so the worker can hand deadlines to the guard process; a step of
// the wall clock (NTP, an operator's date -s) does not move it; and unlike
// CLOCK_MONOTONIC it keeps counting while the machine is suspended, as the
// master's clock does meanwhile: a worker host that sleeps past its lease
// TTL finds its runs' deadlines passed when it wakes, not a suspension's
// length later.

// leaseClock reads CLOCK_BOOTTIME.
func leaseClock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("BUG: CLOCK_BOOTTIME unreadable: " + err.Error()) // Linux ≥ 2.6.39 has it
	}
	return time.Duration(ts.Nano())
}

// sentAt is when a renewal (a Hello or a Heartbeat) left: on the process's
// monotonic clock, which orders it against the start of runs, and on
// leaseClock, from which its lease deadline counts.
type sentAt struct {
	at   time.Time
	boot time.Duration
}

func sentNow() sentAt { return sentAt{at: time.Now(), boot: leaseClock()} }

// renewedLocked records that the master acked the renewal sent at sent: the
// lease of every run held then now ends a lease TTL after sent, for the
// guard and for selfFence. Runs started after sent were not in that
// renewal and keep their deadline. Caller holds a.mu.
func (a *agent) renewedLocked(sent sentAt) {
	if sent.boot <= a.lastRenewal.boot {
		return // an older renewal acked late
	}
	a.lastRenewal = sent
	var pgids []int
	for _, r := range a.runs {
		if r.pgid > 1 && !r.reaped && !r.startedAt.After(sent.at) {
			pgids = append(pgids, r.pgid)
		}
	}
	a.guard.renew(sent.boot+a.leaseTTL, pgids)
}

// leaseLeftLocked tells whether a run that an ExecuteTask read on s names
// may still start: its lease deadline is the send time of the latest
// renewal s's master acked (its Hello, then a Heartbeat) plus the lease
// TTL, on leaseClock, the same deadline the guard and selfFence give the
// run once it starts. The master claimed the lease while serving this
// connection, after that renewal had left, so the real lease ends no
// sooner (but for a claim racing the ack: milliseconds, inside the
// master's requeue margin). An ExecuteTask held in the network (a
// partition) for longer than the TTL must not start: its lease is gone and
// the master may have started the next attempt elsewhere. When it may not
// start, late says how far past the deadline it is. Caller holds a.mu.
func (a *agent) leaseLeftLocked(s *session) (late time.Duration, ok bool) {
	if s == nil || s.renewed.boot == 0 || a.leaseTTL <= 0 {
		return 0, true // no session-scoped renewal known (tests driving execute directly)
	}
	now := leaseClock()
	if d := s.renewed.boot + a.leaseTTL; now >= d {
		return now - d, false
	}
	return 0, true
}

// fenceLoop enforces self-fencing until ctx is done: when no renewal has
// been acked for a whole lease TTL, counted from the send time of the last
// acked one, the master has reaped the leases and may have given the runs to
// another worker, so every running run is SIGKILLed and forgotten at once
// (no report: the master already counts them LOST). Runs that already ended
// and wait for their TaskFinishedAck are kept; they execute nothing, and the
// master decides on reconnect whether it still wants their report.
//
// This is the second line: the guard process kills each run's group at its
// deadline even when this process is frozen (guard.go).
func (a *agent) fenceLoop(ctx context.Context) {
	for {
		a.mu.Lock()
		every := min(max(a.leaseTTL/20, 10*time.Millisecond), 500*time.Millisecond)
		a.mu.Unlock()
		if !backoff.Sleep(ctx, every) {
			return
		}
		a.selfFence(leaseClock())
	}
}

// selfFence kills the running runs whose lease deadline has passed; now is
// a leaseClock reading.
func (a *agent) selfFence(now time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var killed []string
	var late time.Duration
	for _, r := range a.runs {
		if r.fin != nil {
			continue
		}
		d := a.deadlineLocked(r)
		if d == 0 || now <= d {
			continue
		}
		late = max(late, now-d)
		a.forgetLocked(r, true)
		killed = append(killed, r.id)
	}
	if len(killed) > 0 {
		a.log.Error().Strs("tasks", killed).Dur("past_deadline", late).Dur("lease_ttl", a.leaseTTL).
			Msg("self-fencing: no lease renewal acked for a whole lease TTL; killed the runs (they may run elsewhere by now)")
	}
}

// reapedLocked is called once r's leader was reaped. A run that ended past
// its lease deadline was killed for it by the guard, or could have been:
// the master counts it LOST either way, so it is forgotten without a report,
// like a self-fenced one. Caller holds a.mu.
func (a *agent) reapedLocked(r *run) {
	if r.forgotten {
		return
	}
	if d := a.deadlineLocked(r); d != 0 && leaseClock() > d {
		r.log.Error().Dur("lease_ttl", a.leaseTTL).
			Msg("self-fencing: the run ended past its lease deadline (the guard kills it then); forgotten without a report (it may run elsewhere by now)")
		a.forgetLocked(r, true)
		return
	}
	// A renewal late by a few milliseconds moves the deadline after the
	// guard, on its own clock reading, killed the group: the run then died
	// of SIGKILL with a deadline in the future, and reporting that as its
	// exit would fail a run the lease took from it (the chaos soak's one
	// run-ended-badly). Counted LOST like the others.
	if a.guard.lapsed(r.pgid) && killedBySIGKILL(r.cmd.ProcessState) {
		r.log.Error().Dur("lease_ttl", a.leaseTTL).
			Msg("self-fencing: the run died of SIGKILL after its lease deadline had passed once (the guard's kill); forgotten without a report")
		a.forgetLocked(r, true)
	}
}

// deadlineLocked is the lease deadline of r (leaseClock; 0: none yet).
// Caller holds a.mu.
func (a *agent) deadlineLocked(r *run) time.Duration {
	if d, ok := a.guard.deadline(r.pgid); ok {
		return d
	}
	if a.lastRenewal.boot == 0 || a.leaseTTL <= 0 {
		return 0
	}
	return a.lastRenewal.boot + a.leaseTTL // not registered yet
}

// killedBySIGKILL reports whether a process ended by SIGKILL.
func killedBySIGKILL(ps *os.ProcessState) bool {
	if ps == nil {
		return false
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
