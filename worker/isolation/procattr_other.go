//go:build unix && !linux

package isolation

import "syscall"

// ProcAttr puts a run in a process group of its own, under cred (nil:
// the worker's uid). Without Pdeathsig only the guard kills runs left behind
// by a dead worker.
func ProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}
