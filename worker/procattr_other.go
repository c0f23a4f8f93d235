//go:build unix && !linux

package worker

import "syscall"

// runProcAttr puts a run in a process group of its own. Without Pdeathsig
// only the guard kills runs left behind by a dead worker.
func runProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
