package codetree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/core"
)

// statParallel bounds the concurrent Stats of one call (an S3 HEAD each).
const statParallel = 16

// Missing returns the digests of sums the store lacks, in their order.
func Missing(ctx context.Context, blobs artifact.Store, sums []string) ([]string, error) {
	have := make([]bool, len(sums))
	errs := make([]error, len(sums))
	sem := make(chan struct{}, statParallel)
	var wg sync.WaitGroup
	for i, s := range sums {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := blobs.Stat(ctx, s)
			switch {
			case err == nil:
				have[i] = true
			case !errors.Is(err, core.ErrNotFound):
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	out := []string{}
	for i, s := range sums {
		if errs[i] != nil {
			return nil, fmt.Errorf("cannot look up blob %s: %w", s, errs[i])
		}
		if !have[i] {
			out = append(out, s)
		}
	}
	return out, nil
}

// ErrInvalid wraps a manifest that fails Check.
var ErrInvalid = errors.New("invalid manifest")

// ErrMissing wraps a manifest naming blobs the store lacks.
var ErrMissing = errors.New("blobs missing")

// Save checks m (Check), that the store holds every blob it names with the
// right size, and stores its canonical encoding as the blob named by the
// tree hash, which it returns.
func Save(ctx context.Context, blobs artifact.Store, m *Manifest, lim Limits) (string, error) {
	if err := m.Check(lim); err != nil {
		if errors.Is(err, ErrLimit) {
			return "", err
		}
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var sums []string
	size := map[string]int64{}
	for _, f := range m.Files {
		for i, b := range f.Blobs() {
			if _, ok := size[b]; !ok {
				sums = append(sums, b)
			}
			size[b] = ChunkLen(f.Size, i)
		}
	}
	var mu sync.Mutex
	var bad error
	sem := make(chan struct{}, statParallel)
	var wg sync.WaitGroup
	for _, s := range sums {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			b, err := blobs.Stat(ctx, s)
			if err == nil && b.Size != size[s] {
				err = fmt.Errorf("%w: blob %s has %d bytes, the manifest says %d", ErrInvalid, s, b.Size, size[s])
			} else if errors.Is(err, core.ErrNotFound) {
				err = fmt.Errorf("blob %s is not uploaded: %w", s, ErrMissing)
			}
			if err != nil {
				mu.Lock()
				if bad == nil {
					bad = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if bad != nil {
		return "", bad
	}
	enc := m.Encode()
	tree := Hash(enc)
	if _, err := blobs.Stat(ctx, tree); err == nil {
		return tree, nil
	}
	if _, err := blobs.Put(ctx, bytesReader(enc), int64(len(enc))); err != nil {
		return "", fmt.Errorf("cannot store the manifest: %w", err)
	}
	return tree, nil
}

// maxManifestBytes bounds a stored manifest read back (a CODE_MAX_FILES
// tree of long paths stays far below it).
const maxManifestBytes = 256 << 20

// Load reads the manifest of tree from the store and checks it (a blob
// whose bytes do not hash to tree is refused). A tree the store does not
// hold is an error wrapping core.ErrNotFound.
func Load(ctx context.Context, blobs artifact.Store, tree string) (*Manifest, error) {
	if err := artifact.CheckSHA256(tree); err != nil {
		return nil, fmt.Errorf("code tree: %w", err)
	}
	rd, err := blobs.Open(ctx, tree, 0, -1)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	b, err := io.ReadAll(io.LimitReader(rd, maxManifestBytes))
	if err != nil {
		return nil, fmt.Errorf("cannot read the manifest of tree %s: %w", tree, err)
	}
	return Decode(b, tree)
}

// Decode parses manifest bytes that must hash to tree.
func Decode(b []byte, tree string) (*Manifest, error) {
	if Hash(b) != tree {
		return nil, fmt.Errorf("the manifest of tree %s does not hash to it", tree)
	}
	return Parse(b, Limits{})
}

// Open returns the bytes of f (its chunks one after another).
func Open(ctx context.Context, blobs artifact.Store, f File) (io.ReadCloser, error) {
	if f.Mode == ModeSymlink {
		return io.NopCloser(bytesReader([]byte(f.Target))), nil
	}
	return &chunkReader{ctx: ctx, blobs: blobs, left: f.Blobs()}, nil
}

type chunkReader struct {
	ctx   context.Context
	blobs artifact.Store
	left  []string
	cur   io.ReadCloser
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for {
		if c.cur == nil {
			if len(c.left) == 0 {
				return 0, io.EOF
			}
			rd, err := c.blobs.Open(c.ctx, c.left[0], 0, -1)
			if err != nil {
				return 0, err
			}
			c.cur, c.left = rd, c.left[1:]
		}
		n, err := c.cur.Read(p)
		if err == io.EOF {
			c.cur.Close()
			c.cur = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (c *chunkReader) Close() error {
	if c.cur != nil {
		return c.cur.Close()
	}
	return nil
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// PackSuffix names a tree's pack: its tree hash + PackSuffix is every blob
// its manifest names, each once, in manifest order, one after another (a
// worker with a cold cache fetches them as one stream, not a round trip
// each). The pack has no sha256 of its own: each blob in it is checked.
const PackSuffix = ".pack"

// PackBlob is one blob of a pack.
type PackBlob struct {
	SHA256 string
	Size   int64
}

// Pack lists the blobs of m's pack, in order.
func Pack(m *Manifest) []PackBlob {
	seen := map[string]bool{}
	var out []PackBlob
	for _, f := range m.Files {
		for i, b := range f.Blobs() {
			if !seen[b] {
				seen[b] = true
				out = append(out, PackBlob{b, ChunkLen(f.Size, i)})
			}
		}
	}
	return out
}

// PackSize is the length of a pack.
func PackSize(p []PackBlob) int64 {
	var n int64
	for _, b := range p {
		n += b.Size
	}
	return n
}

// OpenPack returns the bytes of pack p from off.
func OpenPack(ctx context.Context, blobs artifact.Store, p []PackBlob, off int64) (io.ReadCloser, error) {
	var start int64
	for i, b := range p {
		if off < start+b.Size || (b.Size == 0 && off == start) {
			first, err := blobs.Open(ctx, b.SHA256, off-start, -1)
			if err != nil {
				return nil, err
			}
			rest := make([]string, 0, len(p)-i-1)
			for _, r := range p[i+1:] {
				rest = append(rest, r.SHA256)
			}
			return &chunkReader{ctx: ctx, blobs: blobs, left: rest, cur: first}, nil
		}
		start += b.Size
	}
	return io.NopCloser(bytes.NewReader(nil)), nil
}
