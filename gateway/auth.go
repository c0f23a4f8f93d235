package gateway

import (
	"bytes"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/internal/auth"
)

// identity is a caller whose token the gateway verified. Its fields go to
// the master in the signed X-User-* headers.
type identity struct {
	id, name, role, version string
}

func (i identity) ok() bool { return i.id != "" }

// verify checks the request's token (internal/auth) and returns its
// identity and where the token came from; a token whose name or role could
// not travel in a header is refused.
func (g *Gateway) verify(ctx *fasthttp.RequestCtx, kind pathKind) (identity, auth.Source, bool) {
	tok, src := auth.FromRequest(&ctx.Request, kind == pathWS)
	if kind == pathApp {
		// The app's own Authorization schemes pass through (auth.FromAppRequest).
		tok, src = auth.FromAppRequest(&ctx.Request)
	}
	who, ok := g.tokens.Verify(tok)
	if !ok || !auth.HeaderSafe(who.Name) || !auth.HeaderSafe(who.Role) {
		return identity{}, src, false
	}
	return identity{id: strconv.FormatInt(who.UserID, 10), name: who.Name, role: who.Role,
		version: strconv.FormatInt(who.Version, 10)}, src, true
}

// wantsHTML reports a browser navigation: a GET or HEAD that accepts HTML.
func wantsHTML(ctx *fasthttp.RequestCtx) bool {
	if !ctx.IsGet() && !ctx.IsHead() {
		return false
	}
	return bytes.Contains(ctx.Request.Header.Peek(fasthttp.HeaderAccept), []byte("text/html"))
}
