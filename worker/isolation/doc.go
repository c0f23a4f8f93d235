// Package isolation is whose uid a run of the worker gets (RUN_AS) and what
// that uid may reach: the uid pool of RUN_AS=dynamic and its lock files,
// the account of RUN_AS=user, each run's private output dir, the checks
// that a run's uid can enter its working directory and execute its
// program, and the killing of every process of a dynamic uid.
//
// What it must never do: give one uid to two live runs (of any worker of
// the machine that shares the lock dir), hand out a uid an account has or
// under which a process still runs, start a run as root or a system
// account, or leave a finished run's dir owned by a uid another run may
// get next, nor what it left in /tmp, /dev/shm and SysV IPC
// (leftovers_linux.go). It knows nothing of the worker's sessions or runs: package
// worker imports it, never the other way.
package isolation
