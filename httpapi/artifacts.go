package httpapi

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/core"
)

// The outputs of runs (API.md "Run outputs"): the list of a run's files
// and their bytes, streamed from the blob store (Config.Blobs) without
// buffering a file. Who may read them is core.Task.OutputsVisibleTo's
// rule under ARTIFACT_VISIBILITY; starting a run from them (resumeFrom) is
// reading them.

// checkResumeFrom makes sure the run sp resumes from exists and that u may
// read its outputs.
func (s *Server) checkResumeFrom(u core.User, sp *spec) *apiError {
	if sp.resumeFrom == "" {
		return nil
	}
	ctx, cancel := storeCtx()
	defer cancel()
	t, err := s.st.Task(ctx, sp.resumeFrom)
	if err != nil {
		if errors.Is(err, core.ErrNotFound) {
			return errBadRequest("resumeFrom: there is no run %s", sp.resumeFrom)
		}
		return storeError(err, "run "+sp.resumeFrom)
	}
	if e := s.outputsVisible(u, t); e != nil {
		return &apiError{e.Status, e.Code, "resumeFrom: " + e.Message}
	}
	return nil
}

// outputsVisible is nil when u may read t's outputs, else the 403 that
// says why not.
func (s *Server) outputsVisible(u core.User, t core.Task) *apiError {
	if t.OutputsVisibleTo(u, s.cfg.OutputsVisibility) {
		return nil
	}
	why := "this master shows a run's output files only to its owner and admins (ARTIFACT_VISIBILITY=owner)"
	if t.Private {
		why = "run " + t.ID + " is private: its output files are shown only to its owner and admins"
	}
	return &apiError{fasthttp.StatusForbidden, codeForbidden, why}
}

// artifactItem is a file of a run as API.md lists it.
type artifactItem struct {
	Path       string    `json:"path"`
	Size       int64     `json:"size"`
	SHA256     string    `json:"sha256"`
	Attempt    int       `json:"attempt"`
	ModifiedAt time.Time `json:"modifiedAt"`
}

// attemptOf reads ?attempt= of run t: 0 (the newest of each path) when
// absent; an attempt the run never had is 404.
func attemptOf(r *request, t core.Task) (int, *apiError) {
	v := string(r.ctx.QueryArgs().Peek("attempt"))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, errBadRequest("attempt must be an integer ≥ 1")
	}
	if n > t.Attempt {
		return 0, errNotFound(fmt.Sprintf("attempt %d of run %s (it is at attempt %d)", n, t.ID, t.Attempt))
	}
	return n, nil
}

// listArtifacts is GET /api/tasks/{id}/artifacts?attempt=.
func (s *Server) listArtifacts(r *request) *apiError {
	ctx, cancel := storeCtx()
	defer cancel()
	t, err := s.st.Task(ctx, r.id)
	if err != nil {
		return storeError(err, "run "+r.id)
	}
	if e := s.outputsVisible(r.user, t); e != nil {
		return e
	}
	attempt, e := attemptOf(r, t)
	if e != nil {
		return e
	}
	rows, err := s.st.Artifacts(ctx, r.id, attempt)
	if err != nil {
		return storeError(err, "artifacts of run "+r.id)
	}
	items := make([]artifactItem, len(rows))
	for i, a := range rows {
		items[i] = artifactItem{Path: a.Path, Size: a.Size, SHA256: a.SHA256, Attempt: a.Attempt, ModifiedAt: a.ModifiedAt.UTC()}
	}
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		Items []artifactItem `json:"items"`
	}{items})
}

// getArtifact is GET /api/tasks/{id}/artifacts/{path}?attempt=: the file's
// bytes, the newest version unless an attempt is named, with its sha256 as
// ETag, and single byte ranges (206, 416). It is always served as a
// download (application/octet-stream, nosniff, a sandbox policy): a run's
// HTML must never run as this site's page.
func (s *Server) getArtifact(r *request) *apiError {
	p := strings.Join(r.rest, "/")
	if err := core.CheckArtifactPath(p); err != nil {
		return errBadRequest("%v: name a file of the run's output dir, as the artifact list gives it", err)
	}
	if s.cfg.Blobs == nil {
		return errNotFound("artifact " + p)
	}
	ctx, cancel := storeCtx()
	defer cancel()
	t, err := s.st.Task(ctx, r.id)
	if err != nil {
		return storeError(err, "run "+r.id)
	}
	if e := s.outputsVisible(r.user, t); e != nil {
		return e
	}
	attempt, e := attemptOf(r, t)
	if e != nil {
		return e
	}
	a, err := s.st.Artifact(ctx, r.id, p, attempt)
	if err != nil {
		return storeError(err, "artifact "+p+" of run "+r.id)
	}
	h := &r.ctx.Response.Header
	etag := `"` + a.SHA256 + `"`
	h.Set("ETag", etag)
	h.Set("Accept-Ranges", "bytes")
	h.Set("Cache-Control", "private, no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	if inm := string(r.ctx.Request.Header.Peek(fasthttp.HeaderIfNoneMatch)); inm != "" && (etagMatches(inm, etag) || inm == a.SHA256) {
		r.ctx.SetStatusCode(fasthttp.StatusNotModified)
		return nil
	}
	off, n, status := int64(0), a.Size, fasthttp.StatusOK
	if rg := string(r.ctx.Request.Header.Peek("Range")); rg != "" && ifRangeMatches(r, etag) {
		var ok bool
		off, n, ok = parseRange(rg, a.Size)
		switch {
		case !ok:
			off, n = 0, a.Size // not one range in the bytes unit: ignored, as RFC 9110 allows
		case n == 0:
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", a.Size))
			return &apiError{fasthttp.StatusRequestedRangeNotSatisfiable, codeRangeNotSatisfiable,
				fmt.Sprintf("the range is outside the file's %d bytes", a.Size)}
		default:
			status = fasthttp.StatusPartialContent
			h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, a.Size))
		}
	}
	// The stream outlives this handler: fasthttp reads it after we return.
	rc, err := s.cfg.Blobs.Open(context.Background(), a.SHA256, off, n)
	if err != nil {
		if errors.Is(err, core.ErrNotFound) || errors.Is(err, artifact.ErrRange) {
			s.log.Warn().Str("traceId", r.trace).Str("task", r.id).Str("path", p).Err(err).Msg("an indexed artifact's bytes are missing")
			return errNotFound("the stored bytes of artifact " + p)
		}
		return &apiError{fasthttp.StatusServiceUnavailable, codeUnavailable, "cannot read the artifact store now; try again"}
	}
	r.ctx.SetStatusCode(status)
	r.ctx.SetContentType("application/octet-stream")
	r.ctx.SetBodyStream(rc, int(n)) // closed by fasthttp once sent
	return nil
}

// ifRangeMatches: a Range is honoured unless If-Range names another version.
func ifRangeMatches(r *request, etag string) bool {
	ir := string(r.ctx.Request.Header.Peek("If-Range"))
	return ir == "" || ir == etag
}

// parseRange reads one "bytes=" range of a file of size bytes: its offset
// and length, n 0 when it is not satisfiable, ok false when the header is
// not one byte range (several ranges, another unit, bad syntax).
func parseRange(h string, size int64) (off, n int64, ok bool) {
	spec, found := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	first, last, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, 0, false
	}
	if first == "" { // the last N bytes
		k, err := strconv.ParseInt(last, 10, 64)
		if err != nil || k < 0 {
			return 0, 0, false
		}
		if k == 0 || size == 0 {
			return 0, 0, true
		}
		k = min(k, size)
		return size - k, k, true
	}
	a, err := strconv.ParseInt(first, 10, 64)
	if err != nil || a < 0 {
		return 0, 0, false
	}
	b := size - 1
	if last != "" {
		if b, err = strconv.ParseInt(last, 10, 64); err != nil || b < a {
			return 0, 0, false
		}
		b = min(b, size-1)
	}
	if a >= size {
		return 0, 0, true
	}
	return a, b - a + 1, true
}
