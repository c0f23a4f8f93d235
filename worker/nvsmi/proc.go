package nvsmi

// procStat is what the sampler needs of /proc/PID/stat.
type procStat struct {
	pgid, ppid int
	state      string // R, S, D, Z, X, ...
	comm       string
}

// procReader reads one process's details; an error means the process is
// gone or cannot be seen. Only the sampler's goroutine calls it.
type procReader interface {
	stat(pid int) (procStat, error)
	owner(pid int) (uint32, error)
	cmdline(pid int) (string, error)
}
