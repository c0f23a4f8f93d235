package cli

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/rlsched/rlsched/core"
)

// client speaks API.md to one server. Not for concurrent use.
type client struct {
	base        string // normalized server URL, no trailing slash
	token       string
	tokenFrom   string // "RLSCHED_TOKEN", the credentials path, or ""
	username    string // of the saved login, for hints
	otherServer string // the saved login's server when it is not base
	hc          *http.Client
	// dl carries downloads: no bound on the whole exchange (a checkpoint
	// may take minutes), one on the wait for an answer; a stalled body is
	// the reader's to notice (download.go).
	dl *http.Client
}

func downloadClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 60 * time.Second
	return &http.Client{Transport: tr}
}

// maxBody bounds what the client reads of one response.
const maxBody = 64 << 20

// Request bodies: over gzipAbove bytes of JSON they go gzip-compressed
// (docs/API.md), and on the wire at most maxWireBody (API.md: 1 MiB) fit.
const (
	gzipAbove   = 64 << 10
	maxWireBody = 1 << 20
)

// encodeBody is the request body of v as sent: JSON, gzip-compressed when
// larger than gzipAbove.
func encodeBody(v any) (body []byte, gzipped bool, err error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, false, fmt.Errorf("BUG: cannot encode request: %w", err)
	}
	if len(b) <= gzipAbove {
		return b, false, nil
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, false, fmt.Errorf("cannot compress request: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, false, fmt.Errorf("cannot compress request: %w", err)
	}
	return buf.Bytes(), true, nil
}

// apiError is a non-2xx answer of the server.
type apiError struct {
	Status  int
	Code    string
	Message string
	TraceID string
	Hint    string // what to do next, for the user
}

func (e *apiError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = strings.ToLower(http.StatusText(e.Status))
	}
	if e.Code != "" {
		return fmt.Sprintf("%s (HTTP %d %s)", msg, e.Status, e.Code)
	}
	return fmt.Sprintf("%s (HTTP %d)", msg, e.Status)
}

// netError is a request that got no HTTP answer.
type netError struct {
	Server      string
	Err         error
	TraceID     string // the id the request carried
	Interrupted bool   // the context was cancelled (Ctrl-C)
}

func (e *netError) Error() string {
	if e.Interrupted {
		return "interrupted"
	}
	return fmt.Sprintf("cannot reach %s: %v", e.Server, e.Err)
}

func (e *netError) Unwrap() error { return e.Err }

// transient reports whether err may go away by itself (network trouble, a
// master restarting, a rate limit), so a long wait should retry rather than
// give up at once.
func transient(err error) bool {
	var ne *netError
	if errors.As(err, &ne) {
		return !ne.Interrupted
	}
	var ae *apiError
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable,
			http.StatusGatewayTimeout:
			return true
		}
	}
	return false
}

func interrupted(err error) bool {
	var ne *netError
	return errors.As(err, &ne) && ne.Interrupted
}

// normalizeServer turns "host:port" or "http://host:port/" into a base URL.
func normalizeServer(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errors.New("empty server URL")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("invalid server URL %q: %v", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("invalid server URL %q: want http://HOST:PORT or https://HOST", s)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath, u.RawQuery, u.Fragment, u.User = "", "", "", nil
	return u.String(), nil
}

// resolveServer: --server, else $RLSCHED_SERVER, else the saved login's
// server, else the URL this user's running `rlsched up` printed, else
// DefaultServer.
func (inv *invocation) resolveServer(saved *credentials) (string, error) {
	s := inv.server
	if !inv.fs.isSet("server") || s == "" {
		s = inv.env.Getenv("RLSCHED_SERVER")
	}
	if s == "" && saved != nil {
		s = saved.Server
	}
	if s == "" {
		s = inv.upDefault()
	}
	if s == "" {
		s = DefaultServer
	}
	return normalizeServer(s)
}

// newClient builds the client for the command. The saved token is only sent
// to the server it was issued by; RLSCHED_TOKEN is sent to any server.
// ok=false means a usage error was reported and code is the exit code.
func (inv *invocation) newClient() (c *client, code int, ok bool) {
	saved := inv.loadCredentials()
	base, err := inv.resolveServer(saved)
	if err != nil {
		return nil, inv.usageError("%v", err), false
	}
	c = &client{base: base, hc: &http.Client{Timeout: 60 * time.Second}, dl: downloadClient()}
	if saved != nil {
		c.username = saved.Username
		if savedBase, err := normalizeServer(saved.Server); err == nil && savedBase == base {
			c.token = saved.Token
			c.tokenFrom, _ = inv.credentialsPath()
		} else {
			c.otherServer = saved.Server
		}
	}
	if t := strings.TrimSpace(inv.env.Getenv("RLSCHED_TOKEN")); t != "" {
		c.token, c.tokenFrom = t, "RLSCHED_TOKEN"
	}
	return c, ExitOK, true
}

// response is a 2xx answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request. body, when not nil, is sent as JSON. A non-2xx answer
// is an *apiError, no answer a *netError.
func (c *client) do(ctx context.Context, method, path string, q url.Values, body any, accept string) (*response, error) {
	hdr := http.Header{}
	if accept != "" {
		hdr.Set("Accept", accept)
	}
	resp, traceID, err := c.send(ctx, c.hc, method, path, q, body, hdr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, &netError{Server: c.base, Err: ctx.Err(), TraceID: traceID, Interrupted: true}
		}
		return nil, &netError{Server: c.base, Err: fmt.Errorf("reading the answer: %w", unwrapURLError(err)), TraceID: traceID}
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("answer of %s %s is larger than %d MiB", method, path, maxBody>>20)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ae := parseAPIError(resp, b)
		if ae.TraceID == "" {
			ae.TraceID = traceID
		}
		ae.Hint = c.hint(ae, resp, path)
		return nil, ae
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// send sends one request through hc and returns its answer, whatever the
// status, with the trace id it carried; no answer is a *netError. hdr adds
// headers (Accept defaults to JSON).
func (c *client) send(ctx context.Context, hc *http.Client, method, path string, q url.Values, body any, hdr http.Header) (*http.Response, string, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	gzipped := false
	raw, isRaw := body.(rawBody)
	if isRaw {
		rd = bytes.NewReader(raw)
	} else if body != nil {
		b, gz, err := encodeBody(body)
		if err != nil {
			return nil, "", err
		}
		rd, gzipped = bytes.NewReader(b), gz
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, "", fmt.Errorf("cannot build request for %s: %w", u, err)
	}
	traceID := core.NewTraceID()
	req.Header.Set("X-Trace-Id", traceID)
	req.Header.Set("User-Agent", "rlsched-cli/"+core.Version)
	req.Header.Set("Accept", "application/json")
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	if isRaw {
		req.Header.Set("Content-Type", "application/octet-stream")
	} else if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if gzipped {
		req.Header.Set("Content-Encoding", "gzip")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, traceID, &netError{Server: c.base, Err: ctx.Err(), TraceID: traceID, Interrupted: true}
		}
		return nil, traceID, &netError{Server: c.base, Err: unwrapURLError(err), TraceID: traceID}
	}
	return resp, traceID, nil
}

// stream GETs path for a download: the answer's body is for the caller to
// read and close. A status other than 200 and 206 is an *apiError (its
// body read); hdr adds headers (Range, If-Range).
func (c *client) stream(ctx context.Context, path string, q url.Values, hdr http.Header) (*http.Response, error) {
	resp, traceID, err := c.send(ctx, c.dl, http.MethodGet, path, q, nil, hdr)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	ae := parseAPIError(resp, b)
	if ae.TraceID == "" {
		ae.TraceID = traceID
	}
	ae.Hint = c.hint(ae, resp, path)
	return nil, ae
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// parseAPIError reads API.md's error shape, the gateway's fallback shape
// ({"status","message","traceId"}) or, failing both, the body's text.
func parseAPIError(resp *http.Response, body []byte) *apiError {
	ae := &apiError{Status: resp.StatusCode, TraceID: resp.Header.Get("X-Trace-Id")}
	var shape struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		TraceID string          `json:"traceId"`
	}
	if json.Unmarshal(body, &shape) == nil {
		var inner struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			TraceID string `json:"traceId"`
		}
		var s string
		switch {
		case len(shape.Error) > 0 && json.Unmarshal(shape.Error, &inner) == nil:
			ae.Code, ae.Message = inner.Code, inner.Message
			if inner.TraceID != "" {
				ae.TraceID = inner.TraceID
			}
		case len(shape.Error) > 0 && json.Unmarshal(shape.Error, &s) == nil:
			ae.Message = s
		}
		if ae.Message == "" {
			ae.Message = shape.Message
		}
		if ae.TraceID == "" {
			ae.TraceID = shape.TraceID
		}
		return ae
	}
	text := strings.TrimSpace(string(body))
	if len(text) > 300 {
		text = text[:300] + "..."
	}
	if strings.HasPrefix(text, "<") { // an HTML error page says nothing useful
		text = ""
	}
	ae.Message = text
	return ae
}

// hint says what to do about ae.
func (c *client) hint(ae *apiError, resp *http.Response, path string) string {
	switch ae.Status {
	case http.StatusUnauthorized:
		if strings.HasPrefix(path, "/api/auth/login") {
			return "check the user name and password; new users run `rlsched register -u NAME`"
		}
		if c.token == "" {
			if c.otherServer != "" {
				return fmt.Sprintf("not logged in to %s (your saved login is for %s): run `rlsched login --server %s -u NAME`",
					c.base, c.otherServer, c.base)
			}
			return "not logged in: run `rlsched login -u NAME`"
		}
		name := c.username
		if name == "" {
			name = "NAME"
		}
		if c.tokenFrom == "RLSCHED_TOKEN" {
			return "the token in RLSCHED_TOKEN was refused: unset it, or set a fresh one"
		}
		return fmt.Sprintf("your login has expired or is not valid here: run `rlsched login -u %s` again", name)
	case http.StatusForbidden:
		if strings.HasPrefix(path, "/api/sweeps/") {
			return "only the owner of a sweep or an admin may change it"
		}
		return "only the owner of a run or an admin may change it"
	case http.StatusNotFound:
		if strings.HasPrefix(path, "/api/tasks/") || strings.HasPrefix(path, "/api/monitor/logs/") {
			return "list your runs with `rlsched ls`"
		}
		if strings.HasPrefix(path, "/api/sweeps/") {
			return "list the sweeps with `rlsched sweep ls`"
		}
		return fmt.Sprintf("is %s an rlsched server? pick another with --server URL", c.base)
	case http.StatusTooManyRequests:
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			return "too many submissions: try again in " + ra + " s"
		}
		return "too many requests: wait a few seconds and try again"
	case http.StatusRequestEntityTooLarge:
		return "the request is over the 1 MiB limit: pass fewer or smaller params/env"
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return "the server is unavailable: try again shortly"
	}
	return ""
}

// getJSON GETs path and decodes the answer into out (when not nil); it
// returns the raw body too, for --json.
func (c *client) getJSON(ctx context.Context, path string, q url.Values, out any) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodGet, path, q, nil, "")
	if err != nil {
		return nil, err
	}
	return resp.body, decodeInto(resp.body, out, path)
}

// getItems GETs the listing at path, {"items": [...]}, for a command that
// prints it: with jsonOut it prints the answer as it is. ok=false means the
// command is over (printed, or an error reported) and code is its exit code.
func getItems[T any](inv *invocation, c *client, path string, q url.Values, jsonOut bool) (items []T, code int, ok bool) {
	var ans struct {
		Items []T `json:"items"`
	}
	raw, err := c.getJSON(inv.ctx, path, q, &ans)
	if err != nil {
		return nil, inv.fail(err), false
	}
	if jsonOut {
		return nil, inv.printJSON(raw), false
	}
	return ans.Items, ExitOK, true
}

// postJSON POSTs body (nil: no body) to path and decodes the answer into out.
func (c *client) postJSON(ctx context.Context, path string, body, out any) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodPost, path, nil, body, "")
	if err != nil {
		return nil, err
	}
	return resp.body, decodeInto(resp.body, out, path)
}

func decodeInto(body []byte, out any, path string) error {
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("cannot understand the server's answer to %s: %v (is the server an rlsched of another version?)", path, err)
	}
	return nil
}

// taskPath is /api/tasks/{id}{suffix}, the id escaped.
func taskPath(id, suffix string) string { return "/api/tasks/" + url.PathEscape(id) + suffix }

// dialWS opens the WebSocket at path of c's server (wss for an https
// one) with query; the token goes as a Bearer header unless query has
// it. A refusal is the server's apiError with its hint, a failure to
// connect a netError.
func (c *client) dialWS(ctx context.Context, path string, query url.Values) (*websocket.Conn, error) {
	u, err := url.Parse(c.base)
	if err != nil {
		return nil, fmt.Errorf("cannot build the WebSocket URL of %s: %w", c.base, err)
	}
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawQuery = query.Encode()
	traceID := core.NewTraceID()
	h := http.Header{}
	h.Set("X-Trace-Id", traceID)
	h.Set("User-Agent", "rlsched-cli/"+core.Version)
	if c.token != "" && !query.Has("token") {
		h.Set("Authorization", "Bearer "+c.token)
	}
	d := websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 30 * time.Second}
	conn, resp, err := d.DialContext(ctx, u.String(), h)
	if err == nil {
		return conn, nil
	}
	if ctx.Err() != nil {
		return nil, &netError{Server: c.base, Err: ctx.Err(), TraceID: traceID, Interrupted: true}
	}
	if resp == nil {
		return nil, &netError{Server: c.base, Err: err, TraceID: traceID}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	ae := parseAPIError(resp, body)
	if ae.TraceID == "" {
		ae.TraceID = traceID
	}
	ae.Hint = c.hint(ae, resp, path)
	return nil, ae
}
