package httpapi

import (
	"io"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/codetree"
	"github.com/rlsched/rlsched/core"
)

// Bounds of one comparison's answer: the paths listed, and the changed
// text files whose unified diff it carries (the rest say diffOmitted).
const (
	maxCompareFiles     = 1000
	maxCompareDiffs     = 50
	maxCompareDiffBytes = 1 << 20
)

// codeChange is one path of GET /api/tasks/{id}/code-diff/{other}.
type codeChange struct {
	Path    string `json:"path"`
	Change  string `json:"change"` // "A", "M", "D" (codetree.Changes)
	OldMode string `json:"oldMode,omitempty"`
	NewMode string `json:"newMode,omitempty"`
	Size    int64  `json:"size"` // b's (a's when deleted)
	// Diff is a modified text file's unified diff; Binary: a modified
	// file that is not text or over codetree.MaxDiffFile; DiffOmitted:
	// past the answer's bounds.
	Diff        string `json:"diff,omitempty"`
	Binary      bool   `json:"binary,omitempty"`
	DiffOmitted bool   `json:"diffOmitted,omitempty"`
}

// codeCompare is GET /api/tasks/{id}/code-diff/{other}: what differs from
// run id's code snapshot to run other's, as `rlsched code-diff id other`
// prints it (codetree.Changes, codetree.UnifiedDiff), for the compare
// page. The caller must be able to read both runs' code.
func (s *Server) codeCompare(r *request) *apiError {
	other := r.param
	if !core.ValidTaskID(other) {
		return errBadRequest("other: invalid run id %q: want [A-Za-z0-9_-]{1,64}", other)
	}
	ta, ma, e := s.codeOf(r)
	if e != nil {
		return e
	}
	rb := *r
	rb.id = other
	tb, mb, e := s.codeOf(&rb)
	if e != nil {
		return e
	}
	ans := struct {
		TreeA        string       `json:"treeA"`
		TreeB        string       `json:"treeB"`
		Same         bool         `json:"same"`
		Files        []codeChange `json:"files"`
		FilesOmitted int          `json:"filesOmitted"`
	}{TreeA: ta.Code.Tree, TreeB: tb.Code.Tree, Same: ta.Code.Tree == tb.Code.Tree, Files: []codeChange{}}
	if ans.Same {
		return s.writeJSON(r, fasthttp.StatusOK, ans)
	}
	diffs, bytes := 0, 0
	for _, ch := range codetree.Changes(ma.Files, mb.Files) {
		if len(ans.Files) == maxCompareFiles {
			ans.FilesOmitted++
			continue
		}
		c := codeChange{Path: ch.Path, Change: string(ch.Kind), OldMode: ch.Old.Mode, NewMode: ch.New.Mode, Size: ch.New.Size}
		if ch.Kind == codetree.Deleted {
			c.Size = ch.Old.Size
		}
		if ch.Kind == codetree.Modified && ch.Old.SHA256 != ch.New.SHA256 {
			switch {
			case ch.Old.Size > codetree.MaxDiffFile || ch.New.Size > codetree.MaxDiffFile:
				c.Binary = true
			case diffs == maxCompareDiffs || bytes >= maxCompareDiffBytes:
				c.DiffOmitted = true
			default:
				xa, err := s.readCodeFile(ch.Old)
				if err != nil {
					return s.blobStoreError(r, err)
				}
				xb, err := s.readCodeFile(ch.New)
				if err != nil {
					return s.blobStoreError(r, err)
				}
				if !codetree.IsText(xa) || !codetree.IsText(xb) {
					c.Binary = true
					break
				}
				c.Diff = codetree.UnifiedDiff(string(xa), string(xb))
				diffs++
				bytes += len(c.Diff)
			}
		}
		ans.Files = append(ans.Files, c)
	}
	return s.writeJSON(r, fasthttp.StatusOK, ans)
}

// readCodeFile reads one file of a stored tree (at most codetree.MaxDiffFile).
func (s *Server) readCodeFile(f codetree.File) ([]byte, error) {
	ctx, cancel := storeCtx()
	defer cancel()
	rc, err := codetree.Open(ctx, s.cfg.Blobs, f)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, codetree.MaxDiffFile+1))
}
