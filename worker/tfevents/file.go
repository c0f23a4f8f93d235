package tfevents

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// pollChunk is how much File reads at a time, and maxPoll how much one Poll
// reads at most, so one large file cannot hold its caller up: the rest
// comes with the next Poll.
const (
	pollChunk = 256 << 10
	maxPoll   = 16 << 20
)

// File follows one event file as its writer appends to it. It is not safe
// for concurrent use.
type File struct {
	path string
	open func() (*os.File, error)
	r    *Reader
	buf  []byte
}

// Follow returns a File that reads path from its start. Nothing is opened
// before the first Poll.
func Follow(path string) *File { return &File{path: path, r: NewReader()} }

// FollowWith is Follow for a file that open opens (for each Poll): a
// caller that must not let any component of the path be a symbolic link
// (the worker, beneath a run's output dir) opens it its own way. open
// returns an error wrapping fs.ErrNotExist for a file not there yet.
func FollowWith(path string, open func() (*os.File, error)) *File {
	return &File{path: path, open: open, r: NewReader()}
}

// Poll reads what was appended since the last call (up to 16 MiB) and
// returns the points of the records it completes. A file that does not
// exist yet has no points; a symbolic link or anything but a regular file
// is an error. A file that became shorter than what was read
// was replaced: it is read again from its start (its points come again).
// After a *CorruptError every Poll returns it, and reads nothing.
func (f *File) Poll() ([]Point, error) {
	if err := f.r.Corrupt(); err != nil {
		return nil, err
	}
	// O_NOFOLLOW: a run must not point the worker at a file outside its
	// output directory; O_NONBLOCK: opening a FIFO must not hang it.
	var fd *os.File
	var err error
	if f.open != nil {
		fd, err = f.open()
	} else {
		fd, err = os.OpenFile(f.path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read event file: %w", err)
	}
	defer fd.Close()
	fi, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot read event file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("cannot read event file %s: not a regular file", f.path)
	}
	if fi.Size() < f.r.Fed() {
		f.r = NewReader()
	}
	if _, err := fd.Seek(f.r.Fed(), io.SeekStart); err != nil {
		return nil, fmt.Errorf("cannot read event file: %w", err)
	}
	if f.buf == nil {
		f.buf = make([]byte, pollChunk)
	}
	var pts []Point
	for read := 0; read < maxPoll; {
		n, rerr := fd.Read(f.buf)
		read += n
		got, err := f.r.Feed(f.buf[:n])
		pts = append(pts, got...)
		if err != nil {
			return pts, err
		}
		if rerr == io.EOF || n == 0 {
			break
		}
		if rerr != nil {
			return pts, fmt.Errorf("cannot read event file: %w", rerr)
		}
	}
	return pts, nil
}
