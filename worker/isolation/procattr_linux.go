//go:build linux

package isolation

import "syscall"

// ProcAttr puts a run in a process group of its own, under cred (nil:
// the worker's uid), and has the kernel SIGKILL it if the worker thread that
// started it dies (Pdeathsig reaches only this direct child; the guard covers
// its descendants). Go sets Pdeathsig after the uid change, which would
// otherwise clear it.
func ProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}
