package artifactpipe

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing n bytes of f at off to
// disk without waiting (sync_file_range SYNC_FILE_RANGE_WRITE): the
// commit's fsync, which makes the file durable, then has little left.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
