package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/apierr"
	"github.com/rlsched/rlsched/internal/auth"
	"github.com/rlsched/rlsched/internal/crosssite"
	"github.com/rlsched/rlsched/internal/signature"
	"github.com/rlsched/rlsched/tunnel"
)

// /sessions/{id}/... (docs/interactive.md, "Notebooks"): the web app of an
// interactive run submitted with a port, for its owner only, through a
// stream over its worker's connection (dispatch.DialSession, package
// tunnel). The path goes to the app unchanged: the app knows its base
// from RLSCHED_BASE_URL. What the app must not do is bounded here, since
// it is the run's code: it never sees the caller's token (the cookie and
// a Bearer Authorization are removed), its cookies are scoped to its own
// path and never the site's sign-in cookie, and a redirect off this site
// is refused.

// SessionApps is what the proxy needs from the dispatcher.
type SessionApps interface {
	// DialSession opens a byte stream to the web app of interactive run
	// id, placed on this master's workers; an error when this master does
	// not hold it or the worker could not connect to the app.
	DialSession(ctx context.Context, id string) (net.Conn, error)
}

const (
	// appDialTimeout bounds opening a stream (the worker's connect).
	appDialTimeout = 15 * time.Second
	// appTimeout bounds one proxied request's answer headers; a streamed
	// body then flows under appIdle per read.
	appTimeout = 5 * time.Minute
	appIdle    = 30 * time.Second
	// appRefusalLimit bounds the answer an app gives to a WebSocket
	// upgrade it refuses.
	appRefusalLimit = 1 << 20
	// appClientTTL: a session's client not used as long is dropped.
	appClientTTL = 5 * time.Minute
)

// appPath: a path under /sessions/<id>; id is its id segment, unescaped
// (not yet validated).
func appPath(raw []byte) (string, bool) {
	const prefix = "/sessions/"
	if !bytes.HasPrefix(raw, []byte(prefix)) {
		return "", false
	}
	seg := raw[len(prefix):]
	if i := bytes.IndexByte(seg, '/'); i >= 0 {
		seg = seg[:i]
	}
	id, err := url.PathUnescape(string(seg))
	if err != nil {
		return string(seg), true // refused by validation
	}
	return id, true
}

func (s *Server) sessionApp(r *request, id string) *apiError {
	ctx := r.ctx
	if !r.gw.signed && !s.hosts.Allows(ctx.Host()) {
		return errMisdirected(ctx.Host())
	}
	r.app = true
	u, e := s.authenticate(r, false)
	if e != nil {
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="rlsched"`)
		return e
	}
	r.user = u
	if !core.ValidTaskID(id) {
		return errBadRequest("malformed session id: use 1–64 of [A-Za-z0-9_-]")
	}
	base := core.SessionPath(id)
	if p := ctx.Request.URI().PathOriginal(); len(p) == len(base)-1 {
		// The app's pages are relative to its base, with the slash.
		ctx.Response.Header.Set("Location", base)
		ctx.SetStatusCode(fasthttp.StatusPermanentRedirect)
		return nil
	}
	upgrade := ctx.Request.Header.ConnectionUpgrade() && len(ctx.Request.Header.Peek(fasthttp.HeaderUpgrade)) > 0
	if e := appCrossSite(r, upgrade); e != nil {
		return e
	}
	sctx, cancel := storeCtx()
	t, err := s.st.Task(sctx, id)
	cancel()
	if err != nil {
		return storeError(err, "session "+id)
	}
	if e := appAllowed(u, t); e != nil {
		return e
	}
	if s.cfg.Apps == nil {
		return &apiError{fasthttp.StatusServiceUnavailable, codeUnavailable, "this master proxies no session apps"}
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	ctx.Request.CopyTo(req)
	appRequest(req, r.site())
	if upgrade {
		return s.appUpgrade(r, t, req)
	}
	hc := s.appClient(id)
	ctx.Response.StreamBody = true
	if err := hc.DoTimeout(req, &ctx.Response, appTimeout); err != nil {
		ctx.Response.Reset()
		return appDialError(id, err)
	}
	ctx.Response.Header.Set("X-Trace-Id", r.trace)
	if e := appResponse(&ctx.Response, id, r.site()); e != nil {
		ctx.Response.Reset()
		return e
	}
	return nil
}

// appAllowed: only the owner, of an interactive run with a web app that
// runs. Admins are refused as at the terminal: the app acts as its owner.
func appAllowed(u core.User, t core.Task) *apiError {
	switch {
	case t.UserID != u.ID:
		return &apiError{fasthttp.StatusForbidden, codeForbidden,
			fmt.Sprintf("session %s is %s's: only its owner may open it (admins may cancel it)", t.ID, t.User)}
	case t.SessionPort() == 0:
		return &apiError{fasthttp.StatusConflict, codeConflict,
			fmt.Sprintf("run %s has no web app: only an interactive run submitted with a port (rlsched notebook) has one", t.ID)}
	case t.Status.Terminal():
		return &apiError{fasthttp.StatusConflict, codeConflict,
			fmt.Sprintf("session %s has ended: %s; its log has what it printed", t.ID, t.Status)}
	case t.Status != core.StatusRunning:
		return &apiError{fasthttp.StatusConflict, codeConflict,
			fmt.Sprintf("session %s has not started yet: %s; open it once it is RUNNING", t.ID, t.Status)}
	}
	return nil
}

// appCrossSite keeps the cookie's rule (internal/crosssite) for the app's
// pages: a state-changing request, or a WebSocket, signed in by the cookie
// must come from this site's own pages. The app's bodies are its own (a
// form, a file), so the JSON-only part of the rule is not applied; the
// Origin (or Sec-Fetch-Site) is required instead of merely checked.
func appCrossSite(r *request, upgrade bool) *apiError {
	h := &r.ctx.Request.Header
	if _, src := auth.FromAppRequest(&r.ctx.Request); src != auth.Cookie {
		return nil
	}
	if !upgrade && !crosssite.StateChanging(h.Method()) {
		return nil
	}
	if bytes.Equal(h.Peek("Sec-Fetch-Site"), []byte("same-origin")) {
		return nil
	}
	if o := h.Peek("Origin"); len(o) > 0 && crosssite.SameOrigin(string(o), r.site()) {
		return nil
	}
	if upgrade && len(h.Peek("Origin")) == 0 {
		return nil // not a browser: it sent the cookie itself
	}
	return &apiError{fasthttp.StatusForbidden, codeForbidden,
		"a request to a session's app signed in by the cookie must come from this site's own pages " +
			"(from a script, send the token as 'Authorization: Bearer <jwt>' instead)"}
}

// appRequest makes the client's request the app's: without our token or
// the gateway's signed headers, with the Host the browser used (apps such
// as Jupyter compare it to the Origin).
func appRequest(req *fasthttp.Request, site string) {
	h := &req.Header
	if auth.IsBearer(h.Peek(fasthttp.HeaderAuthorization)) {
		h.Del(fasthttp.HeaderAuthorization)
	}
	h.DelCookie(auth.CookieName)
	for _, k := range [...]string{signature.HeaderUserID, signature.HeaderUserName, signature.HeaderUserRole,
		signature.HeaderTokenVersion, signature.HeaderTimestamp, signature.HeaderNonce, signature.HeaderClientIP,
		signature.HeaderSignature} {
		h.Del(k)
	}
	h.SetHost(site)
	req.UseHostHeader = true
}

// appResponse bounds what the app answers: its cookies are scoped to its
// own path (never a Domain, never the sign-in cookie), and a redirect
// stays on this site, under the app's path.
func appResponse(resp *fasthttp.Response, id, site string) *apiError {
	base := core.SessionPath(id)
	h := &resp.Header
	if loc := h.Peek(fasthttp.HeaderLocation); len(loc) > 0 {
		fixed, ok := appLocation(string(loc), base, site)
		if !ok {
			return &apiError{fasthttp.StatusBadGateway, apierr.BadGateway,
				fmt.Sprintf("session %s's app redirected off this site (to %q): refused", id, clipLoc(string(loc)))}
		}
		h.Set(fasthttp.HeaderLocation, fixed)
	}
	var cookies []*fasthttp.Cookie
	h.VisitAllCookie(func(key, value []byte) {
		if string(key) == auth.CookieName {
			return // the app may not sign its owner out, or in as another
		}
		c := fasthttp.AcquireCookie()
		if c.ParseBytes(value) != nil {
			fasthttp.ReleaseCookie(c)
			return
		}
		c.SetDomain("")
		if p := string(c.Path()); !strings.HasPrefix(p, base) {
			c.SetPath(base)
		}
		cookies = append(cookies, c)
	})
	h.DelAllCookies()
	for _, c := range cookies {
		h.SetCookie(c)
		fasthttp.ReleaseCookie(c)
	}
	return nil
}

func clipLoc(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// appLocation rewrites a redirect of the app: a path is kept under base
// (a path outside it is taken as relative to it), an absolute URL must name
// this site. ok is false for one off-site.
func appLocation(loc, base, site string) (string, bool) {
	u, err := url.Parse(loc)
	if err != nil {
		return "", false
	}
	if u.Scheme != "" || u.Host != "" || strings.HasPrefix(loc, "//") {
		if u.Scheme != "" && u.Scheme != "http" && u.Scheme != "https" {
			return "", false
		}
		if !strings.EqualFold(u.Host, site) {
			return "", false
		}
		u.Scheme, u.Host, u.User = "", "", nil
	}
	if strings.HasPrefix(u.Path, "/") && !strings.HasPrefix(u.Path, base) && u.Path+"/" != base {
		u.Path = base + strings.TrimPrefix(u.Path, "/")
		u.RawPath = ""
	}
	return u.String(), true
}

// appDialError is the answer when the app could not be reached.
func appDialError(id string, err error) *apiError {
	if errors.Is(err, tunnel.ErrNotHere) {
		return &apiError{fasthttp.StatusServiceUnavailable, codeUnavailable,
			fmt.Sprintf("session %s is held by another master (or its worker is reconnecting); try again, or open it through the gateway", id)}
	}
	if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return &apiError{fasthttp.StatusGatewayTimeout, apierr.BadGateway,
			fmt.Sprintf("session %s's app did not answer in time", id)}
	}
	return &apiError{fasthttp.StatusBadGateway, apierr.BadGateway, fmt.Sprintf("session %s's app: %v", id, err)}
}

// appClient is the HTTP client of session id's app, whose connections are
// streams to it; made on first use, dropped after appClientTTL unused.
func (s *Server) appClient(id string) *fasthttp.HostClient {
	now := time.Now()
	s.apps.mu.Lock()
	defer s.apps.mu.Unlock()
	if s.apps.m == nil {
		s.apps.m = map[string]*appClient{}
	}
	for k, c := range s.apps.m {
		if now.Sub(c.used) > appClientTTL {
			c.hc.CloseIdleConnections()
			delete(s.apps.m, k)
		}
	}
	c := s.apps.m[id]
	if c == nil {
		dial := s.cfg.Apps.DialSession
		c = &appClient{hc: &fasthttp.HostClient{
			Addr: id,
			Dial: func(addr string) (net.Conn, error) {
				ctx, cancel := context.WithTimeout(context.Background(), appDialTimeout)
				defer cancel()
				return dial(ctx, addr)
			},
			StreamResponseBody:       true,
			DisablePathNormalizing:   true,
			NoDefaultUserAgentHeader: true,
			// Header names stay normalized: the rules below must find a
			// "location" or "set-cookie" whatever case the app wrote.
			MaxIdleConnDuration: appIdle,
			ReadTimeout:         appTimeout,
			WriteTimeout:        appTimeout,
			MaxConns:            64,
			MaxConnWaitTimeout:  appDialTimeout,
			// A request that failed on a stream is not sent again: the app
			// may have acted on it.
			RetryIfErr: func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
		}}
		s.apps.m[id] = c
	}
	c.used = now
	return c.hc
}

type appClient struct {
	hc   *fasthttp.HostClient
	used time.Time
}

type appClients struct {
	mu sync.Mutex
	m  map[string]*appClient
}

// appUpgrade proxies a WebSocket (any upgrade): the request goes to the
// app on a stream of its own; a refusal comes back as an ordinary answer;
// a 101 is relayed and the client's connection is joined to the stream.
func (s *Server) appUpgrade(r *request, t core.Task, req *fasthttp.Request) *apiError {
	ctx := r.ctx
	dctx, cancel := context.WithTimeout(context.Background(), appDialTimeout)
	conn, err := s.cfg.Apps.DialSession(dctx, t.ID)
	cancel()
	if err != nil {
		return appDialError(t.ID, err)
	}
	req.Header.Set("Connection", "Upgrade")
	_ = conn.SetDeadline(time.Now().Add(appDialTimeout))
	bw := bufio.NewWriter(conn)
	if err := req.Write(bw); err == nil {
		err = bw.Flush()
	} else {
		conn.Close()
		return appDialError(t.ID, err)
	}
	br := bufio.NewReader(conn)
	resp := &ctx.Response
	if err := resp.ReadLimitBody(br, appRefusalLimit); err != nil {
		conn.Close()
		resp.Reset()
		return appDialError(t.ID, fmt.Errorf("its answer to the upgrade: %w", err))
	}
	if e := appResponse(resp, t.ID, r.site()); e != nil {
		conn.Close()
		resp.Reset()
		return e
	}
	if resp.StatusCode() != fasthttp.StatusSwitchingProtocols {
		conn.Close()
		return nil // the refusal, as the app gave it
	}
	_ = conn.SetDeadline(time.Time{})
	head := appSwitchHead(resp)
	resp.Reset()
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		_ = c.SetDeadline(time.Time{})
		if _, err := c.Write(head); err != nil {
			c.Close()
			conn.Close()
			return
		}
		done := make(chan struct{})
		go func() {
			_, _ = io.Copy(conn, c) // the client's frames
			conn.Close()
			close(done)
		}()
		_, _ = io.Copy(c, br) // what the app sent after its 101, then the rest
		c.Close()
		conn.Close()
		<-done
	})
	return nil
}

// appSwitchHead is the 101's head as the app sent it (rewritten), without
// the length and type fasthttp would add.
func appSwitchHead(resp *fasthttp.Response) []byte {
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	resp.Header.VisitAll(func(k, v []byte) {
		switch strings.ToLower(string(k)) {
		case "content-length", "content-type", "date", "server", "x-trace-id":
			return
		}
		b.Write(k)
		b.WriteString(": ")
		b.Write(v)
		b.WriteString("\r\n")
	})
	b.WriteString("\r\n")
	return b.Bytes()
}
