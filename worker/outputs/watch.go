package outputs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/rlsched/rlsched/core"
)

// The watch of a run's output dir: inotify tells which files were closed
// after writing (IN_CLOSE_WRITE) or renamed into the dir (IN_MOVED_TO), so
// a checkpoint is on its way the moment it is written, not at the next
// walk (Config.ArtifactSync), which stays as the safety net for what the
// watch cannot see (a file written through mmap and never closed, a tree
// past maxWatches, an inotify the kernel refuses).
//
// Each directory is watched through /proc/self/fd of a descriptor opened
// the way Dir opens everything (one component at a time, O_NOFOLLOW), so
// the watch never follows a symbolic link the run made either. Events
// only name files: the upload opens them through Dir as always.

const (
	watchMask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_CREATE
	// maxWatches bounds the directories of one run under watch (each is a
	// kernel object counted against fs.inotify.max_user_watches).
	maxWatches = 4096
	// maxPending bounds the names waiting for the uploader; past it the
	// next sync walks the whole dir instead.
	maxPending = 4096
	// minEventGap is the least time between two syncs the watch starts
	// (a checkpoint written in the gap waits for its end: well under 1 s);
	// eventDuty makes the gap grow with what the last one took (the gap is
	// eventDuty times its duration), so a large file rewritten in a loop
	// takes the link a tenth of the time, not all of it.
	minEventGap = 200 * time.Millisecond
	eventDuty   = 10
)

// watcher is the inotify watch of one run's dir. The reader goroutine owns
// wds; mu guards pending and all, which the uploader takes.
type watcher struct {
	f    *os.File
	dir  *Dir
	log  zerolog.Logger
	poke chan struct{} // has a value when pending or all is set
	done chan struct{} // closed when the reader ended

	wds  map[int32]string // watch descriptor → the dir's rel path ("" is the root)
	full bool             // maxWatches reached (said once)

	mu      sync.Mutex
	pending map[string]struct{}
	all     bool // a directory arrived or events were lost: walk everything
}

// newWatcher starts the watch of d, or returns nil (said in log) when the
// kernel will not give one: the periodic walk is then all there is.
func newWatcher(d *Dir, log zerolog.Logger) *watcher {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		log.Info().Err(err).Msg("cannot watch the output dir (inotify): its files are uploaded at each periodic sync only")
		return nil
	}
	// A non-blocking descriptor in an os.File waits in the runtime's
	// poller, so Close wakes a Read blocked on it.
	w := &watcher{f: os.NewFile(uintptr(fd), "inotify"), dir: d, log: log,
		poke: make(chan struct{}, 1), done: make(chan struct{}),
		wds: map[int32]string{}, pending: map[string]struct{}{}}
	if err := w.addTree(""); err != nil {
		log.Info().Err(err).Msg("cannot watch the output dir (inotify): its files are uploaded at each periodic sync only")
		w.f.Close()
		return nil
	}
	go w.read()
	return w
}

// close ends the watch and waits for its reader. Nil-safe.
func (w *watcher) close() {
	if w == nil {
		return
	}
	w.f.Close()
	<-w.done
}

// pokeCh is the channel a sync is wanted on; nil (never ready) without a
// watch.
func (w *watcher) pokeCh() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.poke
}

// take returns the names that changed since the last take, or all when
// the whole dir must be walked.
func (w *watcher) take() (rels []string, all bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	all, w.all = w.all, false
	if !all {
		rels = make([]string, 0, len(w.pending))
		for p := range w.pending {
			rels = append(rels, p)
		}
	}
	clear(w.pending)
	return rels, all
}

// addTree watches the dir rel and every dir beneath it (a directory made
// or moved in may already hold others). Reader goroutine only, or before
// it starts.
func (w *watcher) addTree(rel string) error {
	if len(w.wds) >= maxWatches {
		if !w.full {
			w.full = true
			w.log.Info().Int("dirs", maxWatches).Msg("the output dir has too many directories to watch: the rest are uploaded at each periodic sync")
		}
		return nil
	}
	fd, err := w.dir.openDirFd(rel)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	wd, err := unix.InotifyAddWatch(int(w.f.Fd()), fmt.Sprintf("/proc/self/fd/%d", fd), watchMask|unix.IN_ONLYDIR)
	if err != nil {
		return fmt.Errorf("cannot watch %q: %w", rel, err)
	}
	w.wds[int32(wd)] = rel
	if strings.Count(rel, "/") >= maxDepth-1 {
		return nil
	}
	ents, _ := f.ReadDir(-1)
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		sub := joinRel(rel, e.Name())
		if core.CheckArtifactPath(sub) != nil {
			continue
		}
		if err := w.addTree(sub); err != nil {
			w.log.Debug().Err(err).Msg("not watching a directory of the output dir")
		}
	}
	return nil
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// read is the reader goroutine: it turns events into pending names.
func (w *watcher) read() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.log.Info().Err(err).Msg("the watch of the output dir ended: its files are uploaded at each periodic sync only")
			}
			return
		}
		w.handle(buf[:n])
	}
}

// handle takes one read's events.
func (w *watcher) handle(b []byte) {
	want := false
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			break
		}
		name := string(bytes.TrimRight(b[unix.SizeofInotifyEvent:end], "\x00"))
		b = b[end:]
		switch {
		case ev.Mask&unix.IN_Q_OVERFLOW != 0:
			w.note("", true)
			want = true
			continue
		case ev.Mask&unix.IN_IGNORED != 0:
			delete(w.wds, ev.Wd)
			continue
		}
		dir, ok := w.wds[ev.Wd]
		if !ok || name == "" {
			continue
		}
		rel := joinRel(dir, name)
		if core.CheckArtifactPath(rel) != nil {
			continue // the walk counts and reports such names
		}
		switch {
		case ev.Mask&unix.IN_ISDIR != 0:
			if ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 && strings.Count(rel, "/") < maxDepth {
				if err := w.addTree(rel); err != nil {
					w.log.Debug().Err(err).Msg("not watching a directory of the output dir")
				}
				// What it held before the watch began is only found by a walk.
				w.note("", true)
				want = true
			}
		case ev.Mask&(unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO) != 0:
			w.note(rel, false)
			want = true
		}
	}
	if want {
		select {
		case w.poke <- struct{}{}:
		default:
		}
	}
}

// note adds rel (or all) to what the next sync sends.
func (w *watcher) note(rel string, all bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case all || len(w.pending) >= maxPending:
		w.all = true
	case !w.all:
		w.pending[rel] = struct{}{}
	}
}
