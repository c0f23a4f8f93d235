package artifactpipe

import (
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing n bytes of f at off to
// disk without waiting (sync_file_range SYNC_FILE_RANGE_WRITE): the
// commit's fsync, which makes the file durable, then has little left.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// lowerPriority runs the calling goroutine, for the rest of its life, on
// a thread of its own niced by backgroundNice (setpriority on the thread
// id; Linux nices threads one by one). Never unlocked, so the thread ends
// with the goroutine and no other goroutine inherits its priority.
func lowerPriority() {
	runtime.LockOSThread()
	tid := unix.Gettid()
	// Getpriority returns 20 - nice (the raw syscall's convention).
	cur, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return
	}
	_ = unix.Setpriority(unix.PRIO_PROCESS, tid, min(20-cur+backgroundNice, 19))
}

// backgroundNice is how much lower than the master's the priority of the
// upload threads is: CFS then gives them about a third of a nice-0
// thread's share when both want a core (weights 335 and 1024).
const backgroundNice = 5
