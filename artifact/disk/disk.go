// Package disk is the default artifact.Store: blobs as files under
// ARTIFACT_DIR.
//
// Layout: sha256/ab/cd/abcd… (two levels of fan-out, so no directory holds
// more than a few thousand entries even at millions of blobs) and tmp/ for
// uploads in progress, in the same file system so that a commit is a
// rename. A Put writes a temporary file while hashing it, fsyncs it, renames
// it to its digest's name and fsyncs the directory: a crash leaves either
// no blob or the whole one, never a torn file under a digest's name.
// Directories are 0700 and files 0600: run outputs are their owners' data.
//
// Several masters may share one ARTIFACT_DIR (a network file system with
// atomic rename): two Puts of the same bytes write the same name, and the
// last rename wins with identical content. This package must never write
// under a digest's name anything but a complete, fsynced file of those
// bytes, and never let a name from outside (only validated digests) touch a
// path.
package disk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/core"
)

// staleTemp is how old an upload's temporary file must be before Open
// removes it as left behind by a crash. A day is far above any upload's
// length, so a file another master is still writing is never taken.
const staleTemp = 24 * time.Hour

// Store is an artifact.Store in one directory. Its methods are safe for
// concurrent use.
type Store struct {
	blobs, tmp string
}

var _ artifact.Store = (*Store)(nil)

// Open returns the store in dir, creating it if needed, and removes
// temporary files of uploads that a crash left behind.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("cannot open the artifact store: ARTIFACT_DIR is empty")
	}
	s := &Store{blobs: filepath.Join(dir, "sha256"), tmp: filepath.Join(dir, "tmp")}
	for _, d := range []string{dir, s.blobs, s.tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("cannot create the artifact directory %s: %w", d, err)
		}
	}
	if err := s.removeStaleTemps(time.Now().Add(-staleTemp)); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) removeStaleTemps(before time.Time) error {
	ents, err := os.ReadDir(s.tmp)
	if err != nil {
		return fmt.Errorf("cannot list %s: %w", s.tmp, err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || fi.ModTime().After(before) {
			continue
		}
		_ = os.Remove(filepath.Join(s.tmp, e.Name()))
	}
	return nil
}

// path returns the file of a valid digest.
func (s *Store) path(sum string) string {
	return filepath.Join(s.blobs, sum[0:2], sum[2:4], sum)
}

// Put implements artifact.Store.
func (s *Store) Put(ctx context.Context, r io.Reader, size int64) (artifact.Blob, error) {
	f, err := os.CreateTemp(s.tmp, "put-*")
	if err != nil {
		return artifact.Blob{}, fmt.Errorf("cannot create a temporary artifact file: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := artifact.NewHasher(size)
	defer h.Close()
	if _, err := io.Copy(f, h.Reader(ctx, r)); err != nil {
		return artifact.Blob{}, fmt.Errorf("cannot store the artifact: %w", err)
	}
	b := h.Sum()
	dst := s.path(b.SHA256)
	if _, err := os.Stat(dst); err == nil {
		return b, nil // stored before: the deferred cleanup drops the copy
	}
	if err := f.Sync(); err != nil {
		return artifact.Blob{}, fmt.Errorf("cannot flush the artifact to disk: %w", err)
	}
	if err := f.Close(); err != nil {
		return artifact.Blob{}, fmt.Errorf("cannot store the artifact: %w", err)
	}
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return artifact.Blob{}, fmt.Errorf("cannot create the artifact directory %s: %w", dir, err)
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return artifact.Blob{}, fmt.Errorf("cannot commit the artifact %s: %w", b.SHA256, err)
	}
	committed = true
	if err := syncDir(dir); err != nil {
		return artifact.Blob{}, fmt.Errorf("cannot flush the artifact directory %s: %w", dir, err)
	}
	return b, nil
}

// StageDir is where uploads that arrive in pieces (the master's artifact
// receiver) keep their partial files: tmp/, on the store's file system, so
// that Adopt is a rename, and shared like the store by every master that
// shares ARTIFACT_DIR, so that one master resumes what another began. Files
// left there a day are removed when a store opens.
func (s *Store) StageDir() string { return s.tmp }

// Adopt commits f, a complete file under StageDir whose digest and size the
// caller computed as it wrote it, as blob b: it is fsynced and renamed to
// b's name (or removed when that blob exists already), and the directory
// fsynced. f is closed in every case. A size that differs from f's is an
// error and commits nothing; the caller is trusted with the digest, as it
// is for the bytes (the receiver hashes every byte it writes).
func (s *Store) Adopt(ctx context.Context, f *os.File, b artifact.Blob) error {
	committed := false
	defer func() {
		f.Close()
		if !committed {
			os.Remove(f.Name())
		}
	}()
	if err := artifact.CheckSHA256(b.SHA256); err != nil {
		return err
	}
	if filepath.Dir(f.Name()) != s.tmp {
		return fmt.Errorf("BUG: cannot adopt %s: not in %s", f.Name(), s.tmp)
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cannot store the artifact: %w", err)
	}
	if fi.Size() != b.Size {
		return fmt.Errorf("cannot adopt %s: it holds %d bytes, not %d: %w", f.Name(), fi.Size(), b.Size, artifact.ErrSize)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	dst := s.path(b.SHA256)
	if _, err := os.Stat(dst); err == nil {
		return nil // stored before: the deferred cleanup drops the copy
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("cannot flush the artifact to disk: %w", err)
	}
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cannot create the artifact directory %s: %w", dir, err)
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return fmt.Errorf("cannot commit the artifact %s: %w", b.SHA256, err)
	}
	committed = true
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("cannot flush the artifact directory %s: %w", dir, err)
	}
	return nil
}

// syncDir makes a rename into dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Open implements artifact.Store.
func (s *Store) Open(ctx context.Context, sum string, off, n int64) (io.ReadCloser, error) {
	if err := artifact.CheckSHA256(sum); err != nil {
		return nil, err
	}
	f, err := os.Open(s.path(sum))
	if err != nil {
		return nil, notFound("read", sum, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("cannot read artifact %s: %w", sum, err)
	}
	if n, err = artifact.CheckRange(fi.Size(), off, n); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("cannot read artifact %s: %w", sum, err)
	}
	return rangeReader{io.LimitReader(f, n), f}, nil
}

type rangeReader struct {
	io.Reader
	io.Closer
}

// Stat implements artifact.Store.
func (s *Store) Stat(ctx context.Context, sum string) (artifact.Blob, error) {
	if err := artifact.CheckSHA256(sum); err != nil {
		return artifact.Blob{}, err
	}
	fi, err := os.Stat(s.path(sum))
	if err != nil {
		return artifact.Blob{}, notFound("stat", sum, err)
	}
	return artifact.Blob{SHA256: sum, Size: fi.Size()}, nil
}

// Delete implements artifact.Store.
func (s *Store) Delete(ctx context.Context, sum string) error {
	if err := artifact.CheckSHA256(sum); err != nil {
		return err
	}
	if err := os.Remove(s.path(sum)); err != nil {
		return notFound("delete", sum, err)
	}
	return nil
}

// notFound maps a missing file to core.ErrNotFound.
func notFound(verb, sum string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cannot %s artifact %s: %w", verb, sum, core.ErrNotFound)
	}
	return fmt.Errorf("cannot %s artifact %s: %w", verb, sum, err)
}
