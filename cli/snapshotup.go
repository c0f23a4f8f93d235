package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlsched/rlsched/codetree"
)

// The upload of a snapshot (httpapi/code.go): ask which blobs the master
// lacks, PUT those, store the manifest. A failed upload is resumed by the
// next submission, which uploads only what is still missing.

const (
	// missingBatch is the most digests one /api/code/missing asks about.
	missingBatch = 10000
	// uploadParallel is how many blobs go up at once.
	uploadParallel = 4
	// progressAbove: an upload of more bytes shows its progress on stderr.
	uploadProgressAbove = 8 << 20
)

// rawBody is a request body sent as is (application/octet-stream).
type rawBody []byte

// errNoSnapshots: the master takes no snapshots (an older master, or one
// without a blob store).
var errNoSnapshots = errors.New("this master does not take code snapshots")

// uploadStats is what an upload did.
type uploadStats struct {
	blobs, uploaded int
	bytes           int64
}

// uploadSnapshot uploads what the master lacks of s and stores its
// manifest; it returns the tree hash.
func (inv *invocation) uploadSnapshot(c *client, s *snapshot) (string, uploadStats, error) {
	ctx := inv.ctx
	var st uploadStats
	sums := make([]string, 0, len(s.blobs))
	for sum := range s.blobs {
		sums = append(sums, sum)
	}
	st.blobs = len(sums)
	var missing []string
	for i := 0; i < len(sums) || i == 0; i += missingBatch {
		var ans struct {
			Missing []string `json:"missing"`
		}
		batch := sums[i:min(i+missingBatch, len(sums))]
		if _, err := c.postJSON(ctx, "/api/code/missing", map[string]any{"sha256": batch}, &ans); err != nil {
			var ae *apiError
			if errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusServiceUnavailable && i == 0) {
				return "", st, fmt.Errorf("%w (%v)", errNoSnapshots, err)
			}
			return "", st, fmt.Errorf("cannot upload the code snapshot: %w", err)
		}
		missing = append(missing, ans.Missing...)
		if len(sums) == 0 {
			break
		}
	}
	var total int64
	for _, m := range missing {
		src, ok := s.blobs[m]
		if !ok {
			return "", st, fmt.Errorf("cannot upload the code snapshot: the master asks for blob %s, which it does not have", m)
		}
		total += src.size
	}
	st.uploaded, st.bytes = len(missing), total
	if err := inv.putBlobs(ctx, c, s, missing, total); err != nil {
		return "", st, err
	}
	var ans struct {
		Tree string `json:"tree"`
	}
	if _, err := c.postJSON(ctx, "/api/code/trees", s.m, &ans); err != nil {
		return "", st, fmt.Errorf("cannot store the code snapshot: %w", err)
	}
	if want := codetree.Hash(s.m.Encode()); ans.Tree != want {
		return "", st, fmt.Errorf("cannot store the code snapshot: the master named it %q, not %s", ans.Tree, want)
	}
	return ans.Tree, st, nil
}

// putBlobs uploads the blobs sums, with progress on stderr for more than
// uploadProgressAbove bytes.
func (inv *invocation) putBlobs(ctx context.Context, c *client, s *snapshot, sums []string, total int64) error {
	if len(sums) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sent atomic.Int64
	var first error
	var mu sync.Mutex
	work := make(chan string)
	var wg sync.WaitGroup
	for range uploadParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sum := range work {
				err := putBlob(ctx, c, sum, s.blobs[sum])
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel()
					continue
				}
				sent.Add(s.blobs[sum].size)
			}
		}()
	}
	done := make(chan struct{})
	if total > uploadProgressAbove {
		go func() {
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					fmt.Fprintf(inv.env.Stderr, "\ruploading code: %s of %s, done\n", humanBytes(sent.Load()), humanBytes(total))
					return
				case <-tick.C:
					fmt.Fprintf(inv.env.Stderr, "\ruploading code: %s of %s", humanBytes(sent.Load()), humanBytes(total))
				}
			}
		}()
	}
	for _, sum := range sums {
		select {
		case work <- sum:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	close(done)
	if first != nil {
		return fmt.Errorf("cannot upload the code snapshot: %w; submitting again uploads only what is missing", first)
	}
	return ctx.Err()
}

// putBlob uploads one blob, read again from its file; bytes that no longer
// hash to sum mean the file changed since it was packed.
func putBlob(ctx context.Context, c *client, sum string, src blobSource) error {
	f, err := os.Open(src.path)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, src.size)
	if _, err := io.ReadFull(io.NewSectionReader(f, src.off, src.size), b); err != nil {
		return fmt.Errorf("cannot read %s: %w", src.path, err)
	}
	if codetree.Hash(b) != sum {
		return fmt.Errorf("%s changed after it was packed; submit again", src.path)
	}
	_, err = c.do(ctx, http.MethodPut, "/api/code/blobs/"+sum, nil, rawBody(b), "")
	return err
}

// codeSource is the directory a submission snapshots: --code, else the
// current one.
func (rf *runFlags) codeSource(inv *invocation) string {
	if rf.codeDir == "" {
		return inv.env.Dir
	}
	if filepath.IsAbs(rf.codeDir) {
		return rf.codeDir
	}
	return filepath.Join(inv.env.Dir, rf.codeDir)
}

// attachCode snapshots the submission's tree into req.Code (tree, subdir),
// unless --no-code or --workdir says the run uses a directory of the
// worker. A master that takes no snapshots gets none, with a warning: the
// run then runs in workdir, as before.
func (inv *invocation) attachCode(c *client, req *submitRequest, rf *runFlags, fs *flagSet) error {
	if rf.noCode || fs.isSet("workdir") {
		return nil
	}
	if req.Algorithm != "" && rf.codeDir == "" {
		return nil // the default trainer is the worker's own: nothing of here runs
	}
	code, err := inv.snapshotCode(c, rf.codeSource(inv), req.Code)
	if errors.Is(err, errNoSnapshots) {
		fmt.Fprintf(inv.env.Stderr, "warning: %v; the run uses the directory %s of the worker\n", err, req.Workdir)
		return nil
	}
	if err != nil {
		return err
	}
	req.Code = code
	req.Workdir = "" // the snapshot is its working directory
	return nil
}

// snapshotCode packs and uploads the tree of dir and returns code (a new
// one when nil) naming it. It says on stderr what it sent.
func (inv *invocation) snapshotCode(c *client, dir string, code *codeRequest) (*codeRequest, error) {
	s, err := packTree(inv.ctx, dir, codetree.DefaultLimits)
	if err != nil {
		return nil, fmt.Errorf("cannot snapshot the code in %s: %w", dir, err)
	}
	tree, st, err := inv.uploadSnapshot(c, s)
	if err != nil {
		return nil, err
	}
	if code == nil {
		code = &codeRequest{}
	}
	code.Tree, code.Subdir = tree, s.subdir
	if st.bytes > uploadProgressAbove {
		// Only after a progress display: the standard error of a small
		// submission stays as it was (scripts read it).
		fmt.Fprintf(inv.env.Stderr, "code %.12s (%d files, %s; uploaded %d blobs, %s)\n", tree, len(s.m.Files), humanBytes(s.m.Size()), st.uploaded, humanBytes(st.bytes))
	}
	return code, nil
}
