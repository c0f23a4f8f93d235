package codecache

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rlsched/rlsched/codetree"
)

// Owner is who an attempt's copy belongs to: the run's uid and gid, and
// whether hard links to the cache are safe for it (it can neither write
// nor chmod a file the worker owns: a uid of its own, not the worker's and
// not root). Nil: the worker's own uid, which gets copies.
type Owner struct {
	UID, GID int
	Link     bool
}

// Copy is what Materialize made.
type Copy struct {
	Dir    string // the copy's root
	Linked int    // files hard-linked to the cache (the others are copies)
}

// Materialize makes dst, which must not exist, a copy of t: its root mode
// 0700 and every directory owned by o, each file a hard link to the cache
// (o.Link) or a copy o owns, symlinks as they are. On an error dst may be
// partly made; the caller removes it (it is inside the run's private dir).
func (c *Cache) Materialize(t *Tree, dst string, o *Owner) (Copy, error) {
	out := Copy{Dir: dst}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return out, fmt.Errorf("cannot make the run's code dir: %w", err)
	}
	made := map[string]bool{"": true}
	mkdirs := func(rel string) error {
		var todo []string
		for d := rel; d != "." && !made[d]; d = filepath.Dir(d) {
			todo = append(todo, d)
		}
		for i := len(todo) - 1; i >= 0; i-- {
			d := todo[i]
			p := filepath.Join(dst, d)
			if err := os.Mkdir(p, 0o755); err != nil {
				return fmt.Errorf("cannot make %s of the code snapshot: %w", d, err)
			}
			if err := chown(p, o); err != nil {
				return err
			}
			made[d] = true
		}
		return nil
	}
	for _, f := range t.M.Files {
		rel := filepath.FromSlash(f.Path)
		if err := mkdirs(filepath.Dir(rel)); err != nil {
			return out, err
		}
		p := filepath.Join(dst, rel)
		switch {
		case f.Mode == codetree.ModeSymlink:
			if err := os.Symlink(f.Target, p); err != nil {
				return out, fmt.Errorf("cannot make the symlink %s of the code snapshot: %w", f.Path, err)
			}
			if err := chown(p, o); err != nil {
				return out, err
			}
		case o != nil && o.Link:
			err := os.Link(c.blobPath(f.SHA256, f.Mode), p)
			if err == nil {
				out.Linked++
				continue
			}
			if !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EMLINK) && !errors.Is(err, unix.EPERM) {
				return out, fmt.Errorf("cannot link %s of the code snapshot: %w", f.Path, err)
			}
			if err := c.copyFile(f, p, o); err != nil {
				return out, err
			}
		default:
			if err := c.copyFile(f, p, o); err != nil {
				return out, err
			}
		}
	}
	if err := chown(dst, o); err != nil {
		return out, err
	}
	return out, nil
}

// copyFile copies f's blob to p, owned by o (a reflink where the file
// system makes one, which costs no bytes until the run writes).
func (c *Cache) copyFile(f codetree.File, p string, o *Owner) error {
	src, err := os.Open(c.blobPath(f.SHA256, f.Mode))
	if err != nil {
		return fmt.Errorf("cannot copy %s of the code snapshot: %w", f.Path, err)
	}
	defer src.Close()
	perm := fs.FileMode(0o644)
	if f.Mode == codetree.ModeExec {
		perm = 0o755
	}
	dst, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, perm)
	if err != nil {
		return fmt.Errorf("cannot copy %s of the code snapshot: %w", f.Path, err)
	}
	if unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())) != nil {
		if _, err := io.Copy(dst, src); err != nil {
			dst.Close()
			return fmt.Errorf("cannot copy %s of the code snapshot: %w", f.Path, err)
		}
	}
	if err := dst.Close(); err != nil {
		return fmt.Errorf("cannot copy %s of the code snapshot: %w", f.Path, err)
	}
	return chown(p, o)
}

// chown gives p (not what it points to) to o.
func chown(p string, o *Owner) error {
	if o == nil {
		return nil
	}
	if err := os.Lchown(p, o.UID, o.GID); err != nil {
		return fmt.Errorf("cannot give %s to uid %d: %w", p, o.UID, err)
	}
	return nil
}

// Subdir returns the directory of the copy a run starts in, made when the
// snapshot has no file in it (a directory git does not track).
func Subdir(cp Copy, subdir string, o *Owner) (string, error) {
	if subdir == "" {
		return cp.Dir, nil
	}
	if err := codetree.CheckSubdir(subdir); err != nil {
		return "", fmt.Errorf("code subdir: %w", err)
	}
	p := cp.Dir
	for _, seg := range strings.Split(subdir, "/") {
		p = filepath.Join(p, seg)
		info, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(p, 0o755); err != nil {
				return "", fmt.Errorf("cannot make the code subdir %s: %w", subdir, err)
			}
			if err := chown(p, o); err != nil {
				return "", err
			}
		case err != nil:
			return "", fmt.Errorf("code subdir %s: %w", subdir, err)
		case !info.IsDir():
			return "", fmt.Errorf("code subdir %s is not a directory of the snapshot", subdir)
		}
	}
	return p, nil
}
