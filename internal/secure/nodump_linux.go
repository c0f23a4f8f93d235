//go:build linux

package secure

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// NoDump makes this process non-dumpable: /proc/<pid>/environ, mem, maps,
// fd and the like become root's, and processes of the same uid can no
// longer ptrace it or read its memory. Its secrets (the environment it
// started with, keys in memory) are then out of reach of runs that share
// its uid; signals still reach it. Also no core dumps.
func NoDump() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("cannot make the process non-dumpable: %w", err)
	}
	return nil
}
