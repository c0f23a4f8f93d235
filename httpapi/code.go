package httpapi

import (
	"bytes"
	"context"
	"errors"
	"mime"
	"path"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/codetree"
	"github.com/rlsched/rlsched/core"
)

// Code snapshots (issue 27, docs/API.md "Code snapshots"): the CLI asks
// which of its files' blobs are missing (codeMissing), uploads those
// (putCodeBlob, one blob of at most codetree.ChunkSize a request, so a
// failed upload resumes by asking again), then stores the manifest
// (putCodeTree), whose hash a submission names as code.tree. Any signed-in
// user may upload; a run's tree is read by whoever may read its outputs.

const (
	// maxMissingQuery bounds the digests of one codeMissing request.
	maxMissingQuery = 10000
	// maxManifestBody is how far a gzip-compressed manifest may inflate.
	maxManifestBody = 8 << 20
)

// codeStore is the blob store, or the 503 of a master without one.
func (s *Server) codeStore() (artifact.Store, *apiError) {
	if s.cfg.Blobs == nil {
		return nil, &apiError{fasthttp.StatusServiceUnavailable, codeUnavailable,
			"this master keeps no blob store (ARTIFACT_DIR or S3), so it cannot take code snapshots: submit with --no-code"}
	}
	return s.cfg.Blobs, nil
}

// codeMissing is POST /api/code/missing {"sha256":[...]} → {"missing":[...]}.
func (s *Server) codeMissing(r *request) *apiError {
	blobs, e := s.codeStore()
	if e != nil {
		return e
	}
	var req struct {
		SHA256 []string `json:"sha256"`
	}
	if e := decodeJSON(r.ctx.Request.Body(), &req); e != nil {
		return e
	}
	if len(req.SHA256) > maxMissingQuery {
		return errBadRequest("sha256 lists %d digests; ask about at most %d at a time", len(req.SHA256), maxMissingQuery)
	}
	for i, d := range req.SHA256 {
		if !artifact.ValidSHA256(d) {
			return errBadRequest("sha256[%d] must be 64 lower-case hex digits", i)
		}
	}
	ctx, cancel := storeCtx()
	defer cancel()
	missing, err := codetree.Missing(ctx, blobs, req.SHA256)
	if err != nil {
		return s.blobStoreError(r, err)
	}
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		Missing []string `json:"missing"`
	}{missing})
}

// putCodeBlob is PUT /api/code/blobs/{sha256}: the body is the blob, at
// most codetree.ChunkSize bytes, stored when it hashes to the path's digest.
func (s *Server) putCodeBlob(r *request) *apiError {
	blobs, e := s.codeStore()
	if e != nil {
		return e
	}
	sum := r.param
	if !artifact.ValidSHA256(sum) {
		return errBadRequest("sha256: the path must end in 64 lower-case hex digits")
	}
	body := r.ctx.Request.Body()
	if len(body) > codetree.ChunkSize {
		return errBadRequest("the blob is %d bytes, over %d: send a larger file as chunks (see the manifest's chunks)", len(body), codetree.ChunkSize)
	}
	if got := codetree.Hash(body); got != sum {
		return errBadRequest("sha256: the body's sha256 is %s, not the path's %s", got, sum)
	}
	ctx, cancel := storeCtx()
	defer cancel()
	if _, err := blobs.Stat(ctx, sum); err == nil {
		r.ctx.SetStatusCode(fasthttp.StatusNoContent)
		return nil
	}
	if _, err := blobs.Put(ctx, bytes.NewReader(body), int64(len(body))); err != nil {
		return s.blobStoreError(r, err)
	}
	r.ctx.SetStatusCode(fasthttp.StatusCreated)
	return nil
}

// treeAnswer is what POST /api/code/trees answers.
type treeAnswer struct {
	Tree  string `json:"tree"`
	Files int    `json:"files"`
	Size  int64  `json:"size"`
}

// putCodeTree is POST /api/code/trees {"files":[...]}: the manifest is
// checked (paths, symlinks, CODE_MAX_MB, CODE_MAX_FILES), every blob it
// names must be stored, and it is stored under its tree hash.
func (s *Server) putCodeTree(r *request) *apiError {
	blobs, e := s.codeStore()
	if e != nil {
		return e
	}
	var m codetree.Manifest
	if e := decodeJSON(r.ctx.Request.Body(), &m); e != nil {
		return e
	}
	ctx, cancel := storeCtx()
	defer cancel()
	tree, err := codetree.Save(ctx, blobs, &m, s.cfg.CodeLimits)
	if err != nil {
		if errors.Is(err, codetree.ErrLimit) {
			return errBadRequest("files: %v; leave large files out (.gitignore or .rlschedignore)", err)
		}
		if errors.Is(err, codetree.ErrMissing) {
			return errBadRequest("files: %v; upload it (PUT /api/code/blobs/{sha256}) and store the tree again", err)
		}
		if errors.Is(err, codetree.ErrInvalid) {
			return errBadRequest("files: %v", err)
		}
		return s.blobStoreError(r, err)
	}
	return s.writeJSON(r, fasthttp.StatusCreated, treeAnswer{Tree: tree, Files: len(m.Files), Size: m.Size()})
}

// blobStoreError is the answer to a failed blob store call.
func (s *Server) blobStoreError(r *request, err error) *apiError {
	trace := ""
	if r != nil {
		trace = r.trace
	}
	s.log.Warn().Str("traceId", trace).Err(err).Msg("blob store")
	return &apiError{fasthttp.StatusServiceUnavailable, codeUnavailable, "cannot reach the blob store now; try again"}
}

// codeOf reads run r.id, checks that r's user may read its outputs, and
// loads its tree's manifest.
func (s *Server) codeOf(r *request) (core.Task, *codetree.Manifest, *apiError) {
	ctx, cancel := storeCtx()
	defer cancel()
	t, err := s.st.Task(ctx, r.id)
	if err != nil {
		return t, nil, storeError(err, "run "+r.id)
	}
	if e := s.outputsVisible(r.user, t); e != nil {
		return t, nil, e
	}
	if t.Code.Tree == "" {
		return t, nil, errNotFound("the code snapshot of run " + r.id + " (it was submitted without one)")
	}
	blobs, e := s.codeStore()
	if e != nil {
		return t, nil, e
	}
	m, err := codetree.Load(ctx, blobs, t.Code.Tree)
	if errors.Is(err, core.ErrNotFound) {
		return t, nil, errNotFound("the code snapshot " + t.Code.Tree + " of run " + r.id)
	}
	if err != nil {
		return t, nil, s.blobStoreError(r, err)
	}
	return t, m, nil
}

// codeFileItem is a file of a run's tree as GET /api/tasks/{id}/code lists it.
type codeFileItem struct {
	Path   string   `json:"path"`
	Size   int64    `json:"size"`
	Mode   string   `json:"mode"`
	SHA256 string   `json:"sha256"`
	Target string   `json:"target,omitempty"`
	Chunks []string `json:"chunks,omitempty"`
}

// listCode is GET /api/tasks/{id}/code → {"tree","subdir","files":[...]}.
func (s *Server) listCode(r *request) *apiError {
	t, m, e := s.codeOf(r)
	if e != nil {
		return e
	}
	items := make([]codeFileItem, len(m.Files))
	for i, f := range m.Files {
		items[i] = codeFileItem{Path: f.Path, Size: f.Size, Mode: f.Mode, SHA256: f.SHA256, Target: f.Target, Chunks: f.Chunks}
	}
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		Tree   string         `json:"tree"`
		Subdir string         `json:"subdir"`
		Size   int64          `json:"size"`
		Files  []codeFileItem `json:"files"`
	}{t.Code.Tree, t.Code.Subdir, m.Size(), items})
}

// getCodeFile is GET /api/tasks/{id}/code/{path}: the file's bytes (a
// symlink's: its target), always as a download, as an artifact is.
func (s *Server) getCodeFile(r *request) *apiError {
	p := strings.Join(r.rest, "/")
	if err := codetree.CheckPath(p); err != nil {
		return errBadRequest("path: %v", err)
	}
	_, m, e := s.codeOf(r)
	if e != nil {
		return e
	}
	i, ok := slices.BinarySearchFunc(m.Files, p, func(f codetree.File, p string) int { return strings.Compare(f.Path, p) })
	if !ok {
		return errNotFound("file " + p + " in the code of run " + r.id)
	}
	f := m.Files[i]
	h := &r.ctx.Response.Header
	h.Set("ETag", `"`+f.SHA256+`"`)
	h.Set("Cache-Control", "private, max-age=86400") // content-addressed
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	h.Set("X-Rlsched-Mode", f.Mode)
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	// The stream outlives this handler: fasthttp reads it after we return.
	rc, err := codetree.Open(context.Background(), s.cfg.Blobs, f)
	if err != nil {
		return s.blobStoreError(r, err)
	}
	r.ctx.SetStatusCode(fasthttp.StatusOK)
	r.ctx.SetContentType("application/octet-stream")
	r.ctx.SetBodyStream(rc, int(f.Size))
	return nil
}

// checkCodeTree makes sure a submission's code.tree is stored, so that no
// run waits for a worker to find out that it is not.
func (s *Server) checkCodeTree(tree string) *apiError {
	if tree == "" {
		return nil
	}
	blobs, e := s.codeStore()
	if e != nil {
		return e
	}
	ctx, cancel := storeCtx()
	defer cancel()
	if _, err := blobs.Stat(ctx, tree); errors.Is(err, core.ErrNotFound) {
		return errBadRequest("code.tree %s is not stored on this master: store its manifest first (POST /api/code/trees)", tree)
	} else if err != nil {
		return s.blobStoreError(nil, err)
	}
	return nil
}
