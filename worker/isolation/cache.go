package isolation

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
)

// Caches are the persistent cache dirs of the rlsched users on this worker,
// DataDir/cache/<user> (mode 0700): what pip, Hugging Face and PyTorch
// download survives a run, outside its output dir (never uploaded), and
// only that user's runs reach it. Under RUN_AS=dynamic a run's uid changes
// from run to run, so the dir belongs to one live run of its user at a
// time: it is given to the run's uid at the start and taken back by the
// worker at the end (the next run of another user may get that uid); a
// second run of the same user meanwhile gets no cache. At the end the
// least recently used files go until the dir is within CACHE_MAX_MB.
//
// Its methods are safe for concurrent use; a nil *Caches gives no dirs.
type Caches struct {
	dir   string
	maxMB int64
	own   struct{ uid, gid int }
	log   zerolog.Logger

	mu   sync.Mutex
	held map[string]bool // users whose dir a live run holds
}

// NewCaches prepares DataDir/cache; maxMB ≤ 0 gives no caches (nil).
func NewCaches(dataDir string, maxMB int64, log zerolog.Logger) (*Caches, error) {
	if maxMB <= 0 {
		return nil, nil
	}
	c := &Caches{dir: filepath.Join(dataDir, "cache"), maxMB: maxMB, log: log, held: map[string]bool{}}
	c.own.uid, c.own.gid = os.Geteuid(), os.Getegid()
	if err := os.Mkdir(c.dir, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("cannot start worker: cannot create the cache dir: %w", err)
	}
	if err := os.Chmod(c.dir, 0o711); err != nil {
		return nil, fmt.Errorf("cannot start worker: %w", err)
	}
	return c, nil
}

// Acquire gives the run of user under id (nil: the worker's uid) its
// user's cache dir, and release to call once the run's processes are gone
// and before its uid is given back; "" (and a no-op release) when the
// worker keeps no caches, the user is unknown, or another live run of the
// user holds the dir.
func (c *Caches) Acquire(user string, id *Identity) (dir string, release func()) {
	noop := func() {}
	if c == nil || !core.ValidUsername(user) {
		return "", noop
	}
	c.mu.Lock()
	if c.held[user] {
		c.mu.Unlock()
		c.log.Info().Str("user", user).Msg("another run of the user holds its cache dir; this one runs without")
		return "", noop
	}
	c.held[user] = true
	c.mu.Unlock()
	dir = filepath.Join(c.dir, user)
	uid, gid := c.own.uid, c.own.gid
	if id != nil {
		uid, gid = int(id.uid), int(id.gid)
	}
	err := os.Mkdir(dir, 0o700)
	if err == nil || errors.Is(err, fs.ErrExist) {
		err = chownTree(dir, uid, gid)
	}
	if err != nil {
		c.log.Warn().Err(err).Str("dir", dir).Msg("cannot give the run its user's cache dir; it runs without")
		c.give(user)
		return "", noop
	}
	return dir, func() {
		// A dynamic uid goes to another user next: the worker takes the
		// dir back. An account's uid is the user's own for good.
		if id != nil && id.lease != nil {
			if err := chownTree(dir, c.own.uid, c.own.gid); err != nil {
				c.log.Error().Err(err).Str("dir", dir).Msg("cannot take the cache dir back from the run's uid; removing it")
				_ = os.RemoveAll(dir)
			}
		}
		c.trim(dir)
		c.give(user)
	}
}

func (c *Caches) give(user string) {
	c.mu.Lock()
	delete(c.held, user)
	c.mu.Unlock()
}

// chownTree gives dir and everything in it to uid:gid, following no
// symbolic link. A file with more than one link is removed, not chowned:
// a run could have linked a file from outside the dir into it.
func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			if !d.IsDir() && st.Nlink > 1 {
				return os.Remove(p)
			}
			if int(st.Uid) == uid && int(st.Gid) == gid {
				return nil
			}
		}
		return os.Lchown(p, uid, gid)
	})
}

// trim removes the least recently used files of dir (by access or
// modification, whichever is later) until it holds at most maxMB.
func (c *Caches) trim(dir string) {
	type file struct {
		path string
		size int64
		used int64
	}
	var files []file
	var total int64
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		used := info.ModTime().UnixNano()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			used = max(used, atimeNano(st))
		}
		files = append(files, file{p, info.Size(), used})
		total += info.Size()
		return nil
	})
	limit := c.maxMB << 20
	if total <= limit {
		return
	}
	slices.SortFunc(files, func(a, b file) int { return cmp.Compare(a.used, b.used) })
	removed := 0
	for _, f := range files {
		if total <= limit {
			break
		}
		if os.Remove(f.path) == nil {
			total -= f.size
			removed++
		}
	}
	c.log.Info().Str("dir", dir).Int("removed", removed).Int64("max_mb", c.maxMB).Msg("trimmed a user's cache dir to its cap")
}

// CacheEnv points a run's caches at dir ("" gives nothing).
func CacheEnv(dir string) []string {
	if dir == "" {
		return nil
	}
	return []string{"XDG_CACHE_HOME=" + dir, "PIP_CACHE_DIR=" + filepath.Join(dir, "pip"),
		"HF_HOME=" + filepath.Join(dir, "huggingface"), "TORCH_HOME=" + filepath.Join(dir, "torch")}
}
