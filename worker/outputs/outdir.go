package outputs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/worker/isolation"
)

// Dir is a run's output dir as the worker reads and restores it: every
// path is opened one component at a time from the dir's own descriptor,
// each with O_NOFOLLOW, so a symbolic link anywhere in a path is never
// followed and nothing outside the dir is ever opened, whatever the run
// (an untrusted program, under its own uid or the worker's) does to its
// files meanwhile. Paths are core.CheckArtifactPath's: no "..", no empty
// element.
//
// A file is read only when the opened descriptor is a regular file with
// one link whose owner is the run's uid (refusal): the worker reads as
// root, so a hard link to a file the run could not read itself (another
// run's checkpoint, the worker's key), or one the run made readable to
// the worker only, is never uploaded. Under the worker's own uid (owner
// nil) the owner is not checked; the link count is.
//
// Its methods are safe for concurrent use (they share only the dir's
// descriptor, which close ends).
type Dir struct {
	path  string // for messages only: never resolved again
	fd    int
	owner *isolation.Identity // the run's uid; nil: the worker's

	// mu makes close wait for a walk, the one method called from outside
	// the uploader's lifetime (Files.CheckLast): a descriptor closed under
	// a walk could be another file's by the next openat.
	mu     sync.RWMutex
	closed bool
}

// Refused is a file of the dir that is never read, and why.
type Refused struct {
	Rel, Why string
	// Kept: a regular file refused for its links or owner; the run's dir
	// is then kept on the worker (a run's own hard-linked checkpoint is
	// not lost with it). A symbolic link or a FIFO is only skipped.
	Kept bool
}

func (r *Refused) Error() string { return fmt.Sprintf("not uploading %s: %s", r.Rel, r.Why) }

const whySymlink = "a symbolic link (never followed)"

// refusal says why the file st must not be read, or nil.
func (d *Dir) refusal(rel string, st *unix.Stat_t) *Refused {
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return &Refused{Rel: rel, Why: whySymlink}
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return &Refused{Rel: rel, Why: "not a regular file (a FIFO, socket or device)"}
	case st.Nlink > 1:
		return &Refused{Rel: rel, Why: fmt.Sprintf("it has %d hard links, and a hard link may be to a file the run cannot read: copy it instead", st.Nlink), Kept: true}
	case d.owner != nil && st.Uid != d.owner.UID():
		return &Refused{Rel: rel, Why: fmt.Sprintf("it belongs to uid %d, not to the run's uid %d", st.Uid, d.owner.UID()), Kept: true}
	case st.Size >= sparseMinSize && st.Blocks*512 < st.Size/sparseRatio:
		return &Refused{Rel: rel, Kept: true, Why: fmt.Sprintf("it is sparse, %.1f MiB in size of which %.1f MiB are on disk (the rest are holes); write it out in full to keep it",
			float64(st.Size)/(1<<20), float64(st.Blocks*512)/(1<<20))}
	}
	return nil
}

// maxDepth bounds the directories a walk descends.
const maxDepth = 64

// maxListedRefusals bounds the refused files a walk lists (a run may make
// millions of links): more than the run's log names (maxRefusalNotes).
const maxListedRefusals = 2 * maxRefusalNotes

// OpenDir opens the dir of the run of uid owner (nil: the worker's), which
// the worker has just made.
func OpenDir(path string, owner *isolation.Identity) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot open the output dir %s: %w", path, err)
	}
	return &Dir{path: path, fd: fd, owner: owner}, nil
}

func (d *Dir) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		unix.Close(d.fd)
	}
}

// dirAt opens the directory of rel's parent elements (made, owned by id,
// when mkdir) and returns its descriptor and rel's last element. The
// caller closes the descriptor unless it is d.fd.
func (d *Dir) dirAt(rel string, mkdir bool, id *isolation.Identity) (int, string, error) {
	if err := core.CheckArtifactPath(rel); err != nil {
		return -1, "", err
	}
	elems := strings.Split(rel, "/")
	dir := d.fd
	for _, e := range elems[:len(elems)-1] {
		if mkdir {
			err := unix.Mkdirat(dir, e, 0o755)
			if err == nil && id != nil {
				err = unix.Fchownat(dir, e, int(id.UID()), int(id.GID()), unix.AT_SYMLINK_NOFOLLOW)
			}
			if err != nil && !errors.Is(err, unix.EEXIST) {
				d.closeDir(dir)
				return -1, "", fmt.Errorf("cannot create %s in the output dir: %w", e, err)
			}
		}
		next, err := unix.Openat(dir, e, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		d.closeDir(dir)
		if err != nil {
			return -1, "", notBeneath(rel, err)
		}
		dir = next
	}
	return dir, elems[len(elems)-1], nil
}

func (d *Dir) closeDir(fd int) {
	if fd != d.fd {
		unix.Close(fd)
	}
}

// notBeneath says a path could not be opened; a symbolic link (ELOOP, or
// ENOTDIR for a link where a directory should be) is named as such.
func notBeneath(rel string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return fmt.Errorf("cannot open %s: a symbolic link or non-directory on the way (never followed): %w", rel, err)
	}
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("cannot open %s: %w", rel, fs.ErrNotExist)
	}
	return fmt.Errorf("cannot open %s: %w", rel, err)
}

// open opens the regular file rel for reading, or returns a *Refused (the
// one check of every read: uploads, the watch's, TensorBoard's). The check
// is of the opened descriptor, so a file swapped after a walk is caught.
// O_NONBLOCK: a FIFO the run put there must not hang the worker.
func (d *Dir) open(rel string) (*os.File, error) {
	dir, name, err := d.dirAt(rel, false, nil)
	if err != nil {
		return nil, err
	}
	defer d.closeDir(dir)
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, &Refused{Rel: rel, Why: whySymlink}
	}
	if err != nil {
		return nil, notBeneath(rel, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("cannot read %s: %w", rel, err)
	}
	if ref := d.refusal(rel, &st); ref != nil {
		unix.Close(fd)
		return nil, ref
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// create makes the file rel (and its missing parents), owned by id, for a
// restore: it must not exist (O_EXCL; the dir is new).
func (d *Dir) create(rel string, id *isolation.Identity) (*os.File, error) {
	dir, name, err := d.dirAt(rel, true, id)
	if err != nil {
		return nil, err
	}
	defer d.closeDir(dir)
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, notBeneath(rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	if id != nil {
		if err := f.Chown(int(id.UID()), int(id.GID())); err != nil {
			f.Close()
			return nil, fmt.Errorf("cannot give %s to %s: %w", rel, id, err)
		}
	}
	return f, nil
}

// remove deletes the file rel (a restore that failed).
func (d *Dir) remove(rel string) {
	if dir, name, err := d.dirAt(rel, false, nil); err == nil {
		_ = unix.Unlinkat(dir, name, 0)
		d.closeDir(dir)
	}
}

// setMtime sets rel's mtime (not following a link), so that a restored
// file counts as the version it was uploaded as.
func (d *Dir) setMtime(rel string, modNs int64) error {
	dir, name, err := d.dirAt(rel, false, nil)
	if err != nil {
		return err
	}
	defer d.closeDir(dir)
	ts := unix.NsecToTimespec(modNs)
	return unix.UtimesNanoAt(dir, name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}

// fileVer is a version of a file: its size and mtime.
type fileVer struct{ size, modNs int64 }

func verOf(fi fs.FileInfo) fileVer { return fileVer{fi.Size(), fi.ModTime().UnixNano()} }

// walked is a regular file a walk found.
type walked struct {
	rel string
	ver fileVer
}

// listing is what a walk found.
type listing struct {
	files     []walked  // the files to read, in path order
	refused   []Refused // what open would refuse (refusal), never read: the first maxListedRefusals
	kept      bool      // one of the refused (listed or not) is Refused.Kept
	skipped   int       // names CheckArtifactPath refuses, dirs too deep
	truncated bool      // more than max files
}

// walk lists the regular files under the dir, in path order, at most max
// of them (truncated then says so), and of those only the ones whose name
// keep accepts (nil: all); symbolic links, devices, FIFOs, sockets and
// the files open refuses are listed as refused, names CheckArtifactPath
// refuses counted as skipped. Each directory is opened from its parent's
// descriptor with O_NOFOLLOW.
func (d *Dir) walk(max int, keep func(name string) bool) (ls listing, err error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return listing{}, errors.New("cannot read the output dir: closed")
	}
	type frame struct {
		fd  int
		rel string
	}
	// A new open of the dir, not a dup: a dup shares the directory's read
	// offset with every other walk.
	dup, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return listing{}, fmt.Errorf("cannot read the output dir: %w", err)
	}
	stack := []frame{{dup, ""}}
	for len(stack) > 0 {
		fr := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		dir := os.NewFile(uintptr(fr.fd), d.path+"/"+fr.rel)
		ents, rerr := dir.ReadDir(-1)
		for _, e := range ents {
			rel := e.Name()
			if fr.rel != "" {
				rel = fr.rel + "/" + e.Name()
			}
			if core.CheckArtifactPath(rel) != nil {
				ls.skipped++
				continue
			}
			if e.IsDir() {
				if strings.Count(rel, "/") >= maxDepth {
					ls.skipped++
					continue
				}
				fd, err := unix.Openat(fr.fd, e.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err == nil {
					stack = append(stack, frame{fd, rel})
				}
				continue
			}
			if keep != nil && !keep(e.Name()) {
				continue
			}
			var st unix.Stat_t
			if err := unix.Fstatat(fr.fd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue // gone since the listing
			}
			if ref := d.refusal(rel, &st); ref != nil {
				if len(ls.refused) < maxListedRefusals {
					ls.refused = append(ls.refused, *ref)
				}
				ls.kept = ls.kept || ref.Kept
				continue
			}
			if len(ls.files) >= max {
				ls.truncated = true
				continue
			}
			ls.files = append(ls.files, walked{rel, fileVer{st.Size, statMtime(&st).UnixNano()}})
		}
		dir.Close()
		if rerr != nil && fr.rel == "" {
			for _, f := range stack {
				unix.Close(f.fd)
			}
			return listing{}, fmt.Errorf("cannot read the output dir: %w", rerr)
		}
	}
	slices.SortFunc(ls.files, func(a, b walked) int { return strings.Compare(a.rel, b.rel) })
	return ls, nil
}

// statMtime is a stat's mtime.
func statMtime(st *unix.Stat_t) time.Time {
	sec, nsec := st.Mtim.Unix()
	return time.Unix(sec, nsec)
}

// openDirFd opens the directory rel ("" is the dir itself) as dirAt opens
// a parent, for a watch; the caller closes the descriptor.
func (d *Dir) openDirFd(rel string) (int, error) {
	if rel == "" {
		return unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	// dirAt opens every element of a path but the last: give it one more.
	dir, _, err := d.dirAt(rel+"/x", false, nil)
	if err != nil {
		return -1, err
	}
	if dir == d.fd {
		return -1, fmt.Errorf("BUG: %q opened as the output dir itself", rel)
	}
	return dir, nil
}
