package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	ignore "github.com/sabhiram/go-gitignore"

	"github.com/rlsched/rlsched/codetree"
)

// A run's code snapshot (issue 27), packed where the CLI runs: in a git
// work tree, every tracked file as it is in the working tree and every
// untracked file git does not ignore (git ls-files --cached --others
// --exclude-standard); elsewhere the directory itself less what its
// .rlschedignore (gitignore syntax) names. Modes and symlinks are kept; a
// symlink that leaves the tree is refused (codetree.Manifest.Check). Each
// file is hashed as it is read, and a file that changes meanwhile makes
// the pack start over (packTries times).

// snapshot is a packed tree: its manifest and where each blob's bytes are.
type snapshot struct {
	root   string // the tree's root on this machine
	subdir string // the directory submitted from, relative to root ("" at the root)
	git    bool
	m      codetree.Manifest
	blobs  map[string]blobSource // by sha256
	buf    []byte                // one chunk, reused by every file
}

// blobSource is a blob's bytes: length bytes at off of the file path.
type blobSource struct {
	path      string
	off, size int64
}

// rlschedIgnore names the ignore file of a tree outside git.
const rlschedIgnore = ".rlschedignore"

// packTries bounds the packs of a tree that keeps changing.
const packTries = 3

// errChanged: a file changed while it was read.
var errChanged = errors.New("changed while it was packed")

// packedHook, when set, runs after a file's bytes are read and before they
// are checked against its stat: tests change the file there, the one
// moment a real writer's change is otherwise left to chance.
var packedHook func(path string)

// packTree packs the tree holding dir (its git work tree, else dir) within
// lim; over lim it fails with a listing of the largest files and
// directories.
func packTree(ctx context.Context, dir string, lim codetree.Limits) (*snapshot, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	var err2 error
	for try := 0; try < packTries; try++ {
		var s *snapshot
		s, err2 = packOnce(ctx, dir, lim)
		if !errors.Is(err2, errChanged) {
			return s, err2
		}
	}
	return nil, fmt.Errorf("%w %d times; stop what writes into the tree, or leave its files out (%s)", err2, packTries, ignoreHint(false))
}

func packOnce(ctx context.Context, dir string, lim codetree.Limits) (*snapshot, error) {
	s := &snapshot{root: dir, blobs: map[string]blobSource{}}
	var paths []string
	if top, ok := gitTop(ctx, dir); ok {
		s.root, s.git = top, true
		var err error
		if paths, err = gitFiles(ctx, top); err != nil {
			return nil, err
		}
	} else {
		var err error
		if paths, err = walkFiles(dir, lim.MaxFiles); err != nil {
			return nil, err
		}
	}
	if rel, err := filepath.Rel(s.root, dir); err == nil && rel != "." {
		s.subdir = filepath.ToSlash(rel)
	}
	// Sizes first: a tree over the limits is refused before a byte is read.
	type entry struct {
		path string
		info fs.FileInfo
	}
	entries := make([]entry, 0, len(paths))
	var total int64
	for _, p := range paths {
		info, err := os.Lstat(filepath.Join(s.root, filepath.FromSlash(p)))
		if errors.Is(err, fs.ErrNotExist) {
			continue // tracked, deleted in the working tree: not in it
		}
		if err != nil {
			return nil, fmt.Errorf("cannot pack %s: %w", p, err)
		}
		if !info.Mode().IsRegular() && info.Mode()&fs.ModeSymlink == 0 {
			continue // a submodule, a socket: no file to run
		}
		entries = append(entries, entry{p, info})
		total += info.Size()
	}
	if len(entries) > lim.MaxFiles || total > lim.MaxBytes {
		sizes := make([]sizedPath, len(entries))
		for i, e := range entries {
			sizes[i] = sizedPath{e.path, e.info.Size()}
		}
		return nil, overLimit(sizes, total, lim, s.git)
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f, err := s.packFile(e.path, e.info)
		if err != nil {
			return nil, err
		}
		s.m.Files = append(s.m.Files, f)
	}
	if err := s.m.Check(lim); err != nil {
		return nil, fmt.Errorf("cannot snapshot %s: %w", s.root, err)
	}
	return s, nil
}

// packFile hashes one file (its chunks too) as it reads it.
func (s *snapshot) packFile(p string, info fs.FileInfo) (codetree.File, error) {
	full := filepath.Join(s.root, filepath.FromSlash(p))
	if info.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(full)
		if err != nil {
			return codetree.File{}, fmt.Errorf("cannot pack the symlink %s: %w", p, err)
		}
		sum := sha256.Sum256([]byte(target))
		return codetree.File{Path: p, Mode: codetree.ModeSymlink, Size: int64(len(target)), SHA256: hex.EncodeToString(sum[:]), Target: target}, nil
	}
	f, err := os.Open(full)
	if err != nil {
		return codetree.File{}, fmt.Errorf("cannot pack %s: %w; make it readable, or leave it out (%s)", p, err, ignoreHint(s.git))
	}
	defer f.Close()
	mode := codetree.ModeFile
	if info.Mode()&0o111 != 0 {
		mode = codetree.ModeExec
	}
	whole := sha256.New()
	var chunks []string
	if s.buf == nil {
		s.buf = make([]byte, codetree.ChunkSize)
	}
	buf := s.buf
	var n int64
	for {
		k, err := io.ReadFull(f, buf)
		if k > 0 {
			whole.Write(buf[:k])
			if n > 0 || k == len(buf) { // maybe more than one chunk: each its own blob
				cs := sha256.Sum256(buf[:k])
				c := hex.EncodeToString(cs[:])
				chunks = append(chunks, c)
				s.blobs[c] = blobSource{path: full, off: n, size: int64(k)}
			}
			n += int64(k)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return codetree.File{}, fmt.Errorf("cannot pack %s: %w", p, err)
		}
	}
	if packedHook != nil {
		packedHook(full)
	}
	after, err := os.Lstat(full)
	if err != nil || n != info.Size() || after.Size() != n || !after.ModTime().Equal(info.ModTime()) {
		return codetree.File{}, fmt.Errorf("%s %w", p, errChanged)
	}
	sum := hex.EncodeToString(whole.Sum(nil))
	out := codetree.File{Path: p, Mode: mode, Size: n, SHA256: sum}
	if n > codetree.ChunkSize {
		out.Chunks = chunks
	} else {
		// One blob, the file itself (a file of exactly ChunkSize bytes
		// hashed its one chunk too: the same digest).
		s.blobs[sum] = blobSource{path: full, size: n}
	}
	return out, nil
}

// gitTop is the root of the git work tree holding dir.
func gitTop(ctx context.Context, dir string) (string, bool) {
	var out limitedBuffer
	out.limit = 4096
	if err := runGit(ctx, dir, &out, "rev-parse", "--show-toplevel"); err != nil {
		return "", false
	}
	top := strings.TrimSpace(out.buf.String())
	return top, top != ""
}

// maxGitList bounds git ls-files' output (paths of a tree far over
// CODE_MAX_FILES are refused anyway).
const maxGitList = 64 << 20

// gitFiles lists the tree's files, as paths relative to top.
func gitFiles(ctx context.Context, top string) ([]string, error) {
	var out limitedBuffer
	out.limit = maxGitList
	if err := runGit(ctx, top, &out, "-c", "core.quotePath=off", "ls-files", "-z", "--cached", "--others", "--exclude-standard"); err != nil {
		return nil, fmt.Errorf("cannot list the files of %s: %w", top, err)
	}
	if out.n > int64(out.limit) {
		return nil, fmt.Errorf("cannot list the files of %s: git ls-files printed over %d MiB; ignore what is not code", top, maxGitList>>20)
	}
	var paths []string
	seen := map[string]bool{}
	for _, p := range bytes.Split(out.buf.Bytes(), []byte{0}) {
		// A path with conflicts is listed once per stage.
		if len(p) > 0 && !seen[string(p)] {
			seen[string(p)] = true
			paths = append(paths, string(p))
		}
	}
	return paths, nil
}

// walkFiles lists dir's files (not following symlinks) less those its
// .rlschedignore names; it stops past max+1 of them (a home directory
// would take long to walk, and is over the limit anyway).
func walkFiles(dir string, max int) ([]string, error) {
	ign := ignore.CompileIgnoreLines()
	if b, err := os.ReadFile(filepath.Join(dir, rlschedIgnore)); err == nil {
		ign = ignore.CompileIgnoreLines(strings.Split(string(b), "\n")...)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("cannot read %s: %w", filepath.Join(dir, rlschedIgnore), err)
	}
	var paths []string
	err := filepath.WalkDir(dir, func(full string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("cannot pack %s: %w", full, err)
		}
		rel, _ := filepath.Rel(dir, full)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		match := rel
		if d.IsDir() {
			match += "/"
		}
		if ign.MatchesPath(match) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() {
			paths = append(paths, rel)
			if len(paths) > max {
				return filepath.SkipAll
			}
		}
		return nil
	})
	return paths, err
}

// sizedPath is a file or directory and its size, for overLimit.
type sizedPath struct {
	path string
	size int64
}

// overLimit is the refusal of a tree over lim: the largest files and
// directories, and what to do.
func overLimit(files []sizedPath, total int64, lim codetree.Limits, git bool) error {
	dirs := map[string]int64{}
	for _, f := range files {
		for d := filepath.Dir(f.path); d != "."; d = filepath.Dir(d) {
			dirs[d+"/"] += f.size
		}
	}
	for d, n := range dirs {
		files = append(files, sizedPath{d, n})
	}
	slices.SortFunc(files, func(a, b sizedPath) int {
		if a.size != b.size {
			return int(min(max(b.size-a.size, -1), 1))
		}
		return strings.Compare(a.path, b.path)
	})
	var b strings.Builder
	n := fmt.Sprint(len(files) - len(dirs))
	if len(files)-len(dirs) > lim.MaxFiles {
		n = "more than " + fmt.Sprint(lim.MaxFiles)
	}
	fmt.Fprintf(&b, "the code snapshot would be %s files, %s; the limits are %d files and %s (CODE_MAX_FILES, CODE_MAX_MB). The largest:\n",
		n, humanBytes(total), lim.MaxFiles, humanBytes(lim.MaxBytes))
	for _, f := range files[:min(len(files), 10)] {
		fmt.Fprintf(&b, "  %10s  %s\n", humanBytes(f.size), f.path)
	}
	fmt.Fprintf(&b, "leave data and outputs out (%s), or submit with --no-code", ignoreHint(git))
	return errors.New(b.String())
}

func ignoreHint(git bool) string {
	if git {
		return "add them to .gitignore"
	}
	return "list them in " + rlschedIgnore
}
