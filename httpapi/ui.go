package httpapi

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"path"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/obs"
)

// The dashboard: static files embedded in the binary, no build step. The
// pages are client-side routes that all answer index.html; its scripts and
// styles live under /static/. Everything here is public (API.md: "the
// dashboard's static files and login page"); the data behind the pages is
// not, the scripts fetch it with the HttpOnly jwt_token cookie.

//go:embed ui
var uiFS embed.FS

// uiFile is one embedded file, ready to serve.
type uiFile struct {
	body        []byte
	contentType string
	etag        string
}

var uiFiles = loadUIFiles()

// uiIndex is the page every client-side route answers.
const uiIndex = "index.html"

// uiContentSecurityPolicy allows only this site's own scripts, styles,
// images and connections (the REST API and /ws).
const uiContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; " +
	"img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; " +
	"form-action 'self'; frame-ancestors 'none'"

func loadUIFiles() map[string]uiFile {
	out := map[string]uiFile{}
	err := fs.WalkDir(uiFS, "ui", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := uiFS.ReadFile(p)
		if err != nil {
			return err
		}
		out[strings.TrimPrefix(p, "ui/")] = embedded(b, uiContentType(p))
		return nil
	})
	if err != nil {
		panic("BUG: the embedded dashboard is unreadable: " + err.Error())
	}
	return out
}

// embedded is a file of the binary ready to serve; its ETag changes with
// its content and with the version.
func embedded(b []byte, contentType string) uiFile {
	sum := sha256.Sum256(b)
	return uiFile{body: b, contentType: contentType, etag: `"` + hex.EncodeToString(sum[:12]) + `-` + core.Version + `"`}
}

func uiContentType(p string) string {
	switch path.Ext(p) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".json":
		return "application/json; charset=utf-8"
	}
	return "application/octet-stream"
}

// uiRoutes are the dashboard's routes: its pages, its static files, and
// a page no route knows, asked for by a browser.
func (s *Server) uiRoutes(m *obs.MasterMetrics) (page, static, missing *route) {
	page = &route{method: fasthttp.MethodGet, pattern: "/{page}", public: true, h: s.serveUIIndex, met: m.Route("ui")}
	static = &route{method: fasthttp.MethodGet, pattern: "/static/{rest...}", public: true, h: s.serveUIStatic,
		met: m.Route("ui/static")}
	missing = &route{method: fasthttp.MethodGet, pattern: "/{unknown...}", public: true, h: s.serveUIMissing, met: m.Route("ui/missing")}
	return page, static, missing
}

// wantsPage: r is a browser's navigation (it accepts HTML), which should
// get a page saying "not found" rather than the API's JSON error; a script
// (curl's */*, the clients' JSON) still gets the JSON.
func wantsPage(r *request) bool {
	return strings.Contains(string(r.ctx.Request.Header.Peek(fasthttp.HeaderAccept)), "text/html")
}

// serveUIMissing answers 404 with the dashboard, whose router shows its
// "Page not found" with a way back (issue 32: it was raw JSON).
func (s *Server) serveUIMissing(r *request) *apiError {
	r.ctx.Request.Header.Del(fasthttp.HeaderIfNoneMatch) // a 404 is never "not modified"
	if e := s.serveUIFile(r, uiIndex); e != nil {
		return e
	}
	r.ctx.SetStatusCode(fasthttp.StatusNotFound)
	return nil
}

// uiRoute maps the dashboard's paths (already split and unescaped) to the
// handler: the client-side routes answer index.html, /static/<file> the file.
// ok is false for any other path.
func (s *Server) uiRoute(segs []string) (rt *route, rest []string, ok bool) {
	switch {
	case len(segs) == 1 && (segs[0] == "" || segs[0] == "login" || segs[0] == "runs" ||
		segs[0] == "submit" || segs[0] == "compare" || segs[0] == "workers" || segs[0] == "queue" || segs[0] == "health" ||
		segs[0] == "users" || segs[0] == "sweeps" || segs[0] == "settings"):
		return s.uiPage, nil, true
	case len(segs) == 2 && (segs[0] == "runs" || segs[0] == "sweeps" || segs[0] == "pipelines") && core.ValidTaskID(segs[1]):
		return s.uiPage, nil, true
	case len(segs) >= 2 && segs[0] == "static":
		return s.uiStatic, segs[1:], true
	}
	return nil, nil, false
}

func (s *Server) serveUIIndex(r *request) *apiError {
	return s.serveUIFile(r, uiIndex)
}

func (s *Server) serveUIStatic(r *request) *apiError {
	name := strings.Join(r.rest, "/")
	if name == uiIndex {
		return errNotFound("file")
	}
	return s.serveUIFile(r, name)
}

// serveUIFile answers an embedded file, or 304 when the client's copy is
// current. Browsers revalidate on every load (no-cache), so an upgraded
// binary's dashboard is picked up at once.
func (s *Server) serveUIFile(r *request, name string) *apiError {
	f, ok := uiFiles[name]
	if !ok {
		return errNotFound("file")
	}
	return serveEmbedded(r, f, name == uiIndex)
}

// serveEmbedded answers a file of the binary (a page when page is set: it
// gets the dashboard's content security policy).
func serveEmbedded(r *request, f uiFile, page bool) *apiError {
	h := &r.ctx.Response.Header
	h.Set(fasthttp.HeaderCacheControl, "no-cache")
	h.Set(fasthttp.HeaderETag, f.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	if page {
		h.Set("Content-Security-Policy", uiContentSecurityPolicy)
		h.Set("X-Frame-Options", "DENY")
	}
	if inm := string(r.ctx.Request.Header.Peek(fasthttp.HeaderIfNoneMatch)); inm != "" && etagMatch(inm, f.etag) {
		r.ctx.SetStatusCode(fasthttp.StatusNotModified)
		return nil
	}
	r.ctx.SetStatusCode(fasthttp.StatusOK)
	r.ctx.SetContentType(f.contentType)
	r.ctx.SetBody(f.body)
	return nil
}

// etagMatch reports whether an If-None-Match list names etag (or is "*").
func etagMatch(list, etag string) bool {
	for _, t := range strings.Split(list, ",") {
		t = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(t), "W/"))
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}
