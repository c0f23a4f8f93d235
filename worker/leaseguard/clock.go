package leaseguard

import (
	"time"

	"golang.org/x/sys/unix"
)

// Lease deadlines are kept on CLOCK_BOOTTIME. It is one clock for the whole
// machine, so the worker can hand deadlines to the guard process; a step of
// the wall clock (NTP, an operator's date -s) does not move it; and unlike
// CLOCK_MONOTONIC it keeps counting while the machine is suspended, as the
// master's clock does meanwhile: a worker host that sleeps past its lease
// TTL finds its runs' deadlines passed when it wakes, not a suspension's
// length later.

// Now reads CLOCK_BOOTTIME.
func Now() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("BUG: CLOCK_BOOTTIME unreadable: " + err.Error()) // Linux ≥ 2.6.39 has it
	}
	return time.Duration(ts.Nano())
}
