// Package codecache is a worker's cache of runs' code snapshots (issue 27)
// and the copy each attempt runs in. The cache, DataDir/code, holds the
// manifests of the trees it has (manifests/<tree hash>) and the files'
// bytes once each (blobs/<sha256>, blobs/<sha256>.x for an executable),
// read-only and owned by the worker; a tree is cached when its manifest
// and every blob it names are there. An attempt's copy is made from the
// manifest: directories owned by the run's uid, files hard links to the
// blobs when the run's uid can neither write nor chmod them (a uid of its
// own, not the worker's, not root), else copies it owns (a reflink where
// the file system has them). Least recently used trees go, and then the
// blobs no tree names, when the blobs pass CODE_CACHE_MB.
//
// It never writes outside its dir and the copy's: every path of a manifest
// was checked (codetree.Manifest.Check: clean, relative, no file below a
// file or symlink), files are created O_EXCL|O_NOFOLLOW in directories it
// made itself. Its methods are safe for concurrent use.
package codecache

import (
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
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/codetree"
)

// Fetcher brings one blob of the run's snapshot from the master into w,
// checked against its sha256 (outputs.Files.FetchCode); size < 0 when not
// known (the manifest's).
type Fetcher interface {
	FetchCode(sum string, size int64, w io.Writer) (int64, error)
}

// Cache is one worker's cache of code snapshots.
type Cache struct {
	dir      string
	maxBytes int64
	log      zerolog.Logger

	mu       sync.Mutex
	size     int64                    // bytes under blobs/
	inUse    map[string]int           // trees being fetched or copied
	fetching map[string]chan struct{} // trees being fetched, closed when done
	// parsed are manifests read lately (at most maxParsed), so that a
	// cached tree costs its next attempt no parse.
	parsed map[string]*codetree.Manifest
}

// maxParsed bounds Cache.parsed (a 2,000-file manifest is about 1 MB parsed).
const maxParsed = 32

// Tree is a cached snapshot.
type Tree struct {
	Hash string
	M    *codetree.Manifest
}

// Open opens (or makes) the cache in dir, keeping at most maxBytes of
// blobs (0: no limit), and removes what an interrupted fetch left.
func Open(dir string, maxBytes int64, log zerolog.Logger) (*Cache, error) {
	c := &Cache{dir: dir, maxBytes: maxBytes, log: log, inUse: map[string]int{}, fetching: map[string]chan struct{}{},
		parsed: map[string]*codetree.Manifest{}}
	for _, d := range []string{dir, c.blobDir(), c.manifestDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("cannot make the code cache %s: %w", d, err)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("cannot make the code cache %s: %w", d, err)
		}
	}
	ents, err := os.ReadDir(c.blobDir())
	if err != nil {
		return nil, fmt.Errorf("cannot read the code cache: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp") {
			_ = os.Remove(filepath.Join(c.blobDir(), e.Name()))
			continue
		}
		if info, err := e.Info(); err == nil {
			c.size += info.Size()
		}
	}
	return c, nil
}

func (c *Cache) blobDir() string     { return filepath.Join(c.dir, "blobs") }
func (c *Cache) manifestDir() string { return filepath.Join(c.dir, "manifests") }

// blobPath is where the bytes of a file of mode are.
func (c *Cache) blobPath(sum, mode string) string {
	if mode == codetree.ModeExec {
		return filepath.Join(c.blobDir(), sum+".x")
	}
	return filepath.Join(c.blobDir(), sum)
}

// Acquire returns tree, fetching what the cache lacks of it through f, and
// keeps it from eviction until Release. One fetch per tree at a time: a
// second caller waits for the first's.
func (c *Cache) Acquire(tree string, f Fetcher) (*Tree, error) {
	if err := artifact.CheckSHA256(tree); err != nil {
		return nil, fmt.Errorf("code tree: %w", err)
	}
	c.mu.Lock()
	c.inUse[tree]++
	for {
		ch := c.fetching[tree]
		if ch == nil {
			break
		}
		c.mu.Unlock()
		<-ch
		c.mu.Lock()
	}
	ch := make(chan struct{})
	c.fetching[tree] = ch
	c.mu.Unlock()
	t, added, err := c.fetch(tree, f)
	c.mu.Lock()
	delete(c.fetching, tree)
	close(ch)
	c.mu.Unlock()
	if err != nil {
		c.Release(tree)
		return nil, err
	}
	if added > 0 {
		c.evict()
	}
	return t, nil
}

// Release ends an Acquire.
func (c *Cache) Release(tree string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inUse[tree]--; c.inUse[tree] <= 0 {
		delete(c.inUse, tree)
	}
}

// fetch makes tree complete in the cache and returns it with the bytes it
// added.
func (c *Cache) fetch(tree string, f Fetcher) (*Tree, int64, error) {
	mpath := filepath.Join(c.manifestDir(), tree)
	// A cached manifest means a complete tree: it is written after its
	// blobs, and evict removes it before them.
	now := time.Now()
	c.mu.Lock()
	m := c.parsed[tree]
	c.mu.Unlock()
	if m != nil && os.Chtimes(mpath, now, now) == nil {
		return &Tree{Hash: tree, M: m}, 0, nil
	}
	b, err := os.ReadFile(mpath)
	cached := err == nil
	if errors.Is(err, fs.ErrNotExist) {
		var buf strings.Builder
		if _, err := f.FetchCode(tree, -1, &buf); err != nil {
			return nil, 0, fmt.Errorf("cannot fetch the manifest of code tree %s: %w", tree, err)
		}
		b = []byte(buf.String())
	} else if err != nil {
		return nil, 0, fmt.Errorf("cannot read the cached manifest of %s: %w", tree, err)
	}
	m, err = codetree.Decode(b, tree)
	if err != nil {
		return nil, 0, err
	}
	var added int64
	var pack *packFile
	if !cached {
		if pack, err = c.fetchPack(tree, m, f); err != nil {
			return nil, 0, err
		}
		if pack != nil {
			defer pack.close()
		}
	}
	for _, file := range m.Files {
		if file.Mode == codetree.ModeSymlink || cached {
			continue
		}
		n, err := c.fetchFile(file, f, pack)
		if err != nil {
			return nil, added, err
		}
		added += n
	}
	// The manifest last: a tree whose manifest is cached is complete. Its
	// mtime is the tree's last use (evict).
	if !cached {
		if err := writeAtomic(mpath, b, 0o400); err != nil {
			return nil, added, err
		}
	}
	_ = os.Chtimes(mpath, now, now)
	c.mu.Lock()
	if len(c.parsed) >= maxParsed {
		clear(c.parsed)
	}
	c.parsed[tree] = m
	c.mu.Unlock()
	return &Tree{Hash: tree, M: m}, added, nil
}

// fetchFile makes the blob of file present and returns the bytes added.
func (c *Cache) fetchFile(file codetree.File, f Fetcher, pack *packFile) (int64, error) {
	dst := c.blobPath(file.SHA256, file.Mode)
	if _, err := os.Lstat(dst); err == nil {
		return 0, nil
	}
	// The other mode's copy has the bytes already.
	other := codetree.ModeExec
	if file.Mode == codetree.ModeExec {
		other = codetree.ModeFile
	}
	tmp, err := os.CreateTemp(c.blobDir(), ".tmp")
	if err != nil {
		return 0, fmt.Errorf("cannot write the code cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	w := io.MultiWriter(tmp, h)
	if src, err := os.Open(c.blobPath(file.SHA256, other)); err == nil {
		_, err = io.Copy(w, src)
		src.Close()
		if err != nil {
			tmp.Close()
			return 0, fmt.Errorf("cannot copy a cached blob: %w", err)
		}
	} else {
		for i, sum := range file.Blobs() {
			if off, ok := pack.offset(sum); ok {
				if _, err := io.Copy(w, io.NewSectionReader(pack.f, off, codetree.ChunkLen(file.Size, i))); err != nil {
					tmp.Close()
					return 0, fmt.Errorf("cannot read the fetched pack: %w", err)
				}
				continue
			}
			if _, err := f.FetchCode(sum, codetree.ChunkLen(file.Size, i), w); err != nil {
				tmp.Close()
				return 0, fmt.Errorf("cannot fetch %s of the code snapshot: %w", file.Path, err)
			}
		}
	}
	if err := tmp.Close(); err != nil {
		return 0, fmt.Errorf("cannot write the code cache: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != file.SHA256 {
		return 0, fmt.Errorf("%s of the code snapshot has sha256 %s, not %s: refusing it", file.Path, got, file.SHA256)
	}
	perm := fs.FileMode(0o444)
	if file.Mode == codetree.ModeExec {
		perm = 0o555
	}
	if err := os.Chmod(tmp.Name(), perm); err != nil {
		return 0, fmt.Errorf("cannot write the code cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return 0, fmt.Errorf("cannot write the code cache: %w", err)
	}
	c.mu.Lock()
	c.size += file.Size
	c.mu.Unlock()
	return file.Size, nil
}

// writeAtomic writes b to path through a temporary file and a rename.
func writeAtomic(path string, b []byte, perm fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp")
	if err != nil {
		return fmt.Errorf("cannot write the code cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("cannot write the code cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cannot write the code cache: %w", err)
	}
	if err := os.Chmod(tmp.Name(), perm); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// evict removes the least recently used trees not in use while the blobs
// pass maxBytes, then the blobs no remaining tree names. A blob hard-linked
// into a running attempt's copy stays readable there (the link holds it).
func (c *Cache) evict() {
	c.mu.Lock()
	over := c.maxBytes > 0 && c.size > c.maxBytes
	c.mu.Unlock()
	if !over {
		return
	}
	ents, err := os.ReadDir(c.manifestDir())
	if err != nil {
		c.log.Warn().Err(err).Msg("cannot read the code cache to clean it")
		return
	}
	type used struct {
		tree string
		at   time.Time
	}
	var trees []used
	for _, e := range ents {
		if info, err := e.Info(); err == nil && !strings.HasPrefix(e.Name(), ".tmp") {
			trees = append(trees, used{e.Name(), info.ModTime()})
		}
	}
	slices.SortFunc(trees, func(a, b used) int { return a.at.Compare(b.at) })
	keep := map[string]bool{}
	for _, t := range trees {
		keep[t.tree] = true
	}
	// Drop trees oldest first, estimating what each frees by the blobs
	// only it names; the sweep below frees them.
	need := map[string]int{} // blob name → trees kept that name it
	sizes := map[string]int64{}
	manifests := map[string]*codetree.Manifest{}
	for _, t := range trees {
		b, err := os.ReadFile(filepath.Join(c.manifestDir(), t.tree))
		if err != nil {
			continue
		}
		m, err := codetree.Decode(b, t.tree)
		if err != nil {
			c.log.Warn().Str("tree", t.tree).Err(err).Msg("removing a damaged manifest from the code cache")
			_ = os.Remove(filepath.Join(c.manifestDir(), t.tree))
			delete(keep, t.tree)
			continue
		}
		manifests[t.tree] = m
		for _, name := range blobNames(m) {
			need[name]++
		}
		for _, f := range m.Files {
			sizes[filepath.Base(c.blobPath(f.SHA256, f.Mode))] = f.Size
		}
	}
	c.mu.Lock()
	size := c.size
	for _, t := range trees {
		if size <= c.maxBytes {
			break
		}
		if c.inUse[t.tree] > 0 || manifests[t.tree] == nil {
			continue
		}
		delete(keep, t.tree)
		for _, name := range blobNames(manifests[t.tree]) {
			if need[name]--; need[name] == 0 {
				size -= sizes[name]
			}
		}
	}
	c.mu.Unlock()
	for _, t := range trees {
		if !keep[t.tree] && manifests[t.tree] != nil {
			c.mu.Lock()
			delete(c.parsed, t.tree)
			c.mu.Unlock()
			_ = os.Remove(filepath.Join(c.manifestDir(), t.tree))
			c.log.Info().Str("tree", t.tree).Msg("code cache: removed a tree not used lately")
		}
	}
	c.sweepBlobs(need)
}

// sweepBlobs removes the blobs no kept tree names (need counts them).
func (c *Cache) sweepBlobs(need map[string]int) {
	ents, err := os.ReadDir(c.blobDir())
	if err != nil {
		return
	}
	for _, e := range ents {
		if need[e.Name()] > 0 || strings.HasPrefix(e.Name(), ".tmp") {
			continue
		}
		p := filepath.Join(c.blobDir(), e.Name())
		info, err := os.Lstat(p)
		if err != nil {
			continue
		}
		c.mu.Lock()
		// A tree fetched meanwhile may name it: only when none is being fetched.
		busy := len(c.fetching) > 0
		c.mu.Unlock()
		if busy {
			return
		}
		if os.Remove(p) == nil {
			c.mu.Lock()
			c.size -= info.Size()
			c.mu.Unlock()
		}
	}
}

// blobNames are the cache's names of m's blobs.
func blobNames(m *codetree.Manifest) []string {
	var out []string
	for _, f := range m.Files {
		if f.Mode != codetree.ModeSymlink {
			out = append(out, f.SHA256+map[bool]string{true: ".x", false: ""}[f.Mode == codetree.ModeExec])
		}
	}
	return out
}

// packMin: a tree missing this many blobs is fetched as its pack, one
// stream, rather than a round trip per blob.
const packMin = 8

// packFile is a tree's pack (codetree.Pack) fetched into a temporary file.
type packFile struct {
	f   *os.File
	off map[string]int64 // where each blob starts
}

// offset is where blob sum starts in the pack; false without a pack.
func (p *packFile) offset(sum string) (int64, bool) {
	if p == nil {
		return 0, false
	}
	off, ok := p.off[sum]
	return off, ok
}

func (p *packFile) close() {
	p.f.Close()
	os.Remove(p.f.Name())
}

// fetchPack fetches m's pack when the cache lacks packMin of its blobs or
// more; nil when it lacks fewer.
func (c *Cache) fetchPack(tree string, m *codetree.Manifest, f Fetcher) (*packFile, error) {
	missing := 0
	for _, file := range m.Files {
		if file.Mode == codetree.ModeSymlink {
			continue
		}
		_, err1 := os.Lstat(c.blobPath(file.SHA256, codetree.ModeFile))
		_, err2 := os.Lstat(c.blobPath(file.SHA256, codetree.ModeExec))
		if err1 != nil && err2 != nil {
			missing++
		}
	}
	if missing < packMin {
		return nil, nil
	}
	tmp, err := os.CreateTemp(c.blobDir(), ".tmp-pack")
	if err != nil {
		return nil, fmt.Errorf("cannot write the code cache: %w", err)
	}
	p := &packFile{f: tmp, off: map[string]int64{}}
	var off int64
	for _, b := range codetree.Pack(m) {
		p.off[b.SHA256] = off
		off += b.Size
	}
	n, err := f.FetchCode(tree+codetree.PackSuffix, -1, tmp)
	if err == nil && n != off {
		err = fmt.Errorf("the pack has %d bytes, not %d", n, off)
	}
	if err != nil {
		p.close()
		return nil, fmt.Errorf("cannot fetch code tree %s: %w", tree, err)
	}
	return p, nil
}
