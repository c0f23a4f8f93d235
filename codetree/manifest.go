// Package codetree is a run's code snapshot (issue 27): the manifest of a
// tree of files (paths, modes, sizes, sha256), its canonical encoding, whose
// sha256 is the tree hash, and the rules a manifest must pass wherever it is
// read (the master storing one, a worker materialising one). The files'
// bytes live in the artifact store by their sha256, the manifest too (as a
// blob named by the tree hash); this package reads and writes them only
// through artifact.Store (store.go). It never touches the file system:
// packing a directory is the CLI's (pack.go), extracting one the worker's.
package codetree

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/rlsched/rlsched/artifact"
)

// File modes, as git writes them.
const (
	ModeFile    = "100644"
	ModeExec    = "100755"
	ModeSymlink = "120000"
)

// ChunkSize is the largest blob of a snapshot: a larger file is stored as
// consecutive chunks of this size (the last shorter), each a blob, because
// a request body is at most 1 MiB at the gateway and the master
// (apierr.MaxBody). A file of at most ChunkSize is one blob, its own sha256.
const ChunkSize = 1 << 20

// Limits of a manifest that no configuration lifts.
const (
	MaxPathBytes   = 4096
	MaxTargetBytes = 4096
	// maxSymlinkHops bounds the resolution of a symlink through others (the
	// kernel's own limit is 40).
	maxSymlinkHops = 40
)

// File is one entry of a manifest. A symlink has Target (its content) and
// no blob: SHA256 is the sha256 of Target and Size its length.
type File struct {
	Path   string   `json:"path"`
	Mode   string   `json:"mode"`
	Size   int64    `json:"size"`
	SHA256 string   `json:"sha256"`
	Target string   `json:"target,omitempty"`
	Chunks []string `json:"chunks,omitempty"`
}

// Manifest is a tree: its files, sorted by path.
type Manifest struct {
	Files []File `json:"files"`
}

// Limits are a deployment's CODE_MAX_MB and CODE_MAX_FILES.
type Limits struct {
	MaxBytes int64
	MaxFiles int
}

// DefaultLimits: CODE_MAX_MB 100, CODE_MAX_FILES 10,000 (a manifest of
// 10,000 files is about 1.5 MB, which gzip brings under the 1 MiB a request
// body may have on the wire).
var DefaultLimits = Limits{MaxBytes: 100 << 20, MaxFiles: 10000}

// Blobs lists the blobs a file's bytes are stored as: its chunks, or itself
// when it has none; none for a symlink.
func (f File) Blobs() []string {
	switch {
	case f.Mode == ModeSymlink:
		return nil
	case len(f.Chunks) > 0:
		return f.Chunks
	default:
		return []string{f.SHA256}
	}
}

// ChunkSizes returns the size of chunk i of a file of size bytes.
func ChunkLen(size int64, i int) int64 {
	return min(ChunkSize, size-int64(i)*ChunkSize)
}

// Size is the sum of the files' sizes.
func (m *Manifest) Size() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// Encode returns the manifest's canonical bytes (sorted, compact JSON);
// their sha256 is the tree hash.
func (m *Manifest) Encode() []byte {
	files := append([]File{}, m.Files...)
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	b, err := json.Marshal(Manifest{Files: files})
	if err != nil {
		panic("BUG: a manifest does not encode: " + err.Error())
	}
	return b
}

// Hash returns the tree hash of canonical manifest bytes.
func Hash(canonical []byte) string {
	s := sha256.Sum256(canonical)
	return hex.EncodeToString(s[:])
}

// Parse decodes and checks a manifest (Check) and returns it sorted.
func Parse(b []byte, lim Limits) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("the manifest is not JSON of the documented form: %w", err)
	}
	if err := m.Check(lim); err != nil {
		return nil, err
	}
	return &m, nil
}

// ErrLimit wraps a manifest over CODE_MAX_MB or CODE_MAX_FILES.
var ErrLimit = errors.New("over the snapshot limit")

// Check sorts m's files and validates them: each path relative, clean, no
// "..", unique and never below another file; modes known; digests well
// formed; chunks that add up; symlinks whose target resolves inside the
// tree; the totals within lim. Errors name the file.
func (m *Manifest) Check(lim Limits) error {
	if lim.MaxFiles > 0 && len(m.Files) > lim.MaxFiles {
		return fmt.Errorf("the tree has %d files, over CODE_MAX_FILES (%d): %w", len(m.Files), lim.MaxFiles, ErrLimit)
	}
	slices.SortFunc(m.Files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	var total int64
	links := map[string]string{}
	for i := range m.Files {
		f := &m.Files[i]
		if err := CheckPath(f.Path); err != nil {
			return err
		}
		if i > 0 {
			prev := m.Files[i-1].Path
			if prev == f.Path {
				return fmt.Errorf("file %q is listed twice", f.Path)
			}
		}
		if err := f.check(); err != nil {
			return err
		}
		total += f.Size
		if lim.MaxBytes > 0 && total > lim.MaxBytes {
			return fmt.Errorf("the tree is over CODE_MAX_MB (%d MiB) at %q: %w", lim.MaxBytes>>20, f.Path, ErrLimit)
		}
		if f.Mode == ModeSymlink {
			links[f.Path] = f.Target
		}
	}
	// A file below another file (a/b beside a file or symlink a) could be
	// written through a symlink: never.
	names := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		names[f.Path] = true
	}
	for _, f := range m.Files {
		for d := path.Dir(f.Path); d != "."; d = path.Dir(d) {
			if names[d] {
				return fmt.Errorf("file %q is below the file %q", f.Path, d)
			}
		}
	}
	for p, target := range links {
		if err := resolveInside(p, target, links); err != nil {
			return err
		}
	}
	return nil
}

func (f *File) check() error {
	if !artifact.ValidSHA256(f.SHA256) {
		return fmt.Errorf("file %q: sha256 must be 64 lower-case hex digits", f.Path)
	}
	if f.Size < 0 {
		return fmt.Errorf("file %q: size %d", f.Path, f.Size)
	}
	switch f.Mode {
	case ModeFile, ModeExec:
		if f.Target != "" {
			return fmt.Errorf("file %q: only a symlink has a target", f.Path)
		}
		if f.Size <= ChunkSize {
			if len(f.Chunks) > 0 {
				return fmt.Errorf("file %q: a file of at most %d bytes has no chunks", f.Path, ChunkSize)
			}
			return nil
		}
		want := int((f.Size + ChunkSize - 1) / ChunkSize)
		if len(f.Chunks) != want {
			return fmt.Errorf("file %q: %d bytes are %d chunks of %d bytes, not %d", f.Path, f.Size, want, ChunkSize, len(f.Chunks))
		}
		for _, c := range f.Chunks {
			if !artifact.ValidSHA256(c) {
				return fmt.Errorf("file %q: a chunk's sha256 must be 64 lower-case hex digits", f.Path)
			}
		}
	case ModeSymlink:
		if f.Target == "" || len(f.Target) > MaxTargetBytes || strings.IndexByte(f.Target, 0) >= 0 {
			return fmt.Errorf("symlink %q: its target must be 1 to %d bytes", f.Path, MaxTargetBytes)
		}
		if s := sha256.Sum256([]byte(f.Target)); hex.EncodeToString(s[:]) != f.SHA256 || f.Size != int64(len(f.Target)) {
			return fmt.Errorf("symlink %q: sha256 and size must be those of its target", f.Path)
		}
		if len(f.Chunks) > 0 {
			return fmt.Errorf("symlink %q has no chunks", f.Path)
		}
	default:
		return fmt.Errorf("file %q: mode %q; want %s, %s or %s", f.Path, f.Mode, ModeFile, ModeExec, ModeSymlink)
	}
	return nil
}

// CheckPath validates a path of a snapshot: relative, clean ("a/b", no
// "." or ".." segment, no empty one), valid UTF-8, at most MaxPathBytes.
func CheckPath(p string) error {
	switch {
	case p == "" || len(p) > MaxPathBytes:
		return fmt.Errorf("path %.200q must be 1 to %d bytes", p, MaxPathBytes)
	case !utf8.ValidString(p) || strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("path %.200q must be UTF-8 without NUL", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %.200q must be relative to the tree's root", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("path %.200q must be clean (no empty, \".\" or \"..\" segment)", p)
		}
	}
	return nil
}

// CheckSubdir validates the directory of the tree a run starts in: "" (the
// root) or a clean relative path.
func CheckSubdir(p string) error {
	if p == "" {
		return nil
	}
	return CheckPath(p)
}

// resolveInside resolves the symlink at p as the kernel would, through the
// tree's other symlinks, and fails when it leaves the tree (an absolute
// target, or ".." above the root at any step). A target that does not
// exist inside is allowed (dangling).
func resolveInside(p, target string, links map[string]string) error {
	hops := 0
	var walk func(dir []string, target string) ([]string, error)
	walk = func(dir []string, target string) ([]string, error) {
		if strings.HasPrefix(target, "/") {
			return nil, fmt.Errorf("symlink %q points outside the tree (%.200q is absolute)", p, target)
		}
		cur := slices.Clone(dir)
		for _, seg := range strings.Split(target, "/") {
			switch seg {
			case "", ".":
				continue
			case "..":
				if len(cur) == 0 {
					return nil, fmt.Errorf("symlink %q points outside the tree (%.200q)", p, target)
				}
				cur = cur[:len(cur)-1]
				continue
			}
			cur = append(cur, seg)
			if t, ok := links[strings.Join(cur, "/")]; ok {
				if hops++; hops > maxSymlinkHops {
					return nil, fmt.Errorf("symlink %q: more than %d symlinks to follow", p, maxSymlinkHops)
				}
				var err error
				if cur, err = walk(cur[:len(cur)-1], t); err != nil {
					return nil, err
				}
			}
		}
		return cur, nil
	}
	_, err := walk(strings.Split(path.Dir(p), "/")[:dirDepth(p)], target)
	return err
}

// dirDepth is the number of segments of p's directory.
func dirDepth(p string) int { return strings.Count(p, "/") }
