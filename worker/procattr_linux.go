//go:build linux

package worker

import "syscall"

// runProcAttr puts a run in a process group of its own and has the kernel
// SIGKILL it if the worker thread that started it dies (Pdeathsig reaches
// only this direct child; the guard covers its descendants).
func runProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
