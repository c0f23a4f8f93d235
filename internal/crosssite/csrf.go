package crosssite

import (
	"bytes"
	"net/url"

	"github.com/valyala/fasthttp"
)

// StateChanging reports whether method may change state: POST, PUT, PATCH
// or DELETE (GET, HEAD and OPTIONS never do in this API).
func StateChanging(method []byte) bool {
	switch string(method) {
	case fasthttp.MethodPost, fasthttp.MethodPut, fasthttp.MethodPatch, fasthttp.MethodDelete:
		return true
	}
	return false
}

// Applies reports whether the cross-site rule (CrossSite) applies: a
// state-changing request signed in by the cookie (byCookie), or a sign-in,
// registration or sign-out (session) that comes from a browser (it sends
// Origin, Sec-Fetch-Site or a cookie). A request whose token is in the
// Authorization header is never a browser's doing: a page of another site
// cannot set that header without the server's consent (CORS), and rlsched
// gives none.
func Applies(h *fasthttp.RequestHeader, byCookie, session bool) bool {
	if !StateChanging(h.Method()) {
		return false
	}
	if byCookie {
		return true
	}
	return session && (len(h.Peek("Origin")) > 0 || len(h.Peek("Sec-Fetch-Site")) > 0 || len(h.Peek(fasthttp.HeaderCookie)) > 0)
}

// CrossSite returns why a request the rule applies to must be refused, or
// "" when it may go on. It must be JSON (a form or a plain "simple" request
// of another site cannot send Content-Type: application/json without a
// preflight, which fails), and come from a page of this site: Origin names
// site, or the browser says Sec-Fetch-Site: same-origin. site is the
// host[:port] the browser addressed (the Host, or at a master behind a
// gateway the Host the gateway signed).
func CrossSite(h *fasthttp.RequestHeader, site string) string {
	if !isJSON(h.ContentType()) {
		return "a request signed in by the cookie must send its body as Content-Type: application/json " +
			"(from a script, send the token as 'Authorization: Bearer <jwt>' instead)"
	}
	if bytes.Equal(h.Peek("Sec-Fetch-Site"), []byte("same-origin")) {
		return ""
	}
	if o := h.Peek("Origin"); len(o) > 0 && SameOrigin(string(o), site) {
		return ""
	}
	return "a request signed in by the cookie must come from this site's own pages " +
		"(from a script, send the token as 'Authorization: Bearer <jwt>' instead)"
}

// isJSON: the media type is application/json, parameters aside.
func isJSON(ct []byte) bool {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return bytes.EqualFold(bytes.TrimSpace(ct), []byte("application/json"))
}

// SameOrigin reports whether origin (an Origin header: scheme://host[:port])
// names site (host[:port]); a missing port is the scheme's default. "null"
// and anything unparsable name no site.
func SameOrigin(origin, site string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" || u.User != nil {
		return false
	}
	oh, op, ok := normalise(u.Host)
	if !ok {
		return false
	}
	sh, sp, ok := normalise(site)
	if !ok || oh != sh {
		return false
	}
	def := "80"
	if u.Scheme == "https" {
		def = "443"
	}
	if op == "" {
		op = def
	}
	if sp == "" {
		// The site's Host came without a port: the scheme's default, as
		// the browser used it (behind a proxy, either default).
		return op == def || op == "80" || op == "443"
	}
	return op == sp
}
