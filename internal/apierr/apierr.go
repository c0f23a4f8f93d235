// Package apierr is API.md's error answer, written once for the master
// (httpapi) and the gateway: the HTTP status and
// {"error":{"code","message","traceId"}}, the gateway's fallback body, and
// the answer to a request fasthttp could not read. It never decides what
// went wrong beyond that: callers pick the Error.
package apierr

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"

	"github.com/valyala/fasthttp"
)

// Error codes of API.md, and the ones rlsched adds (docs/API.md).
const (
	BadRequest          = "bad_request"
	Unauthorized        = "unauthorized"
	Forbidden           = "forbidden"
	NotFound            = "not_found"
	MethodNotAllowed    = "method_not_allowed"
	Timeout             = "request_timeout"
	Conflict            = "conflict"
	PayloadTooLarge     = "payload_too_large"
	UnsupportedMedia    = "unsupported_media_type"
	MisdirectedRequest  = "misdirected_request"
	RangeNotSatisfiable = "range_not_satisfiable"
	RateLimited         = "rate_limited"
	HeaderTooLarge      = "header_too_large"
	Internal            = "internal"
	BadGateway          = "bad_gateway"
	Unavailable         = "unavailable"
	GatewayTimeout      = "gateway_timeout"
)

// MaxBody is the largest request body the API takes (API.md: over 1 MiB is
// 413), on the master and at the gateway alike.
const MaxBody = 1 << 20

// Error is an answer other than success: status, code and a sentence for a
// person that says what to do next.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// New returns an Error whose message is format and args.
func New(status int, code, format string, args ...any) *Error {
	return &Error{status, code, fmt.Sprintf(format, args...)}
}

// ErrTooLarge is the answer to a body over MaxBody.
var ErrTooLarge = &Error{fasthttp.StatusRequestEntityTooLarge, PayloadTooLarge,
	fmt.Sprintf("the request body is larger than %d bytes (1 MiB); send less", MaxBody)}

type detail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	TraceID string `json:"traceId"`
}

// Body is the JSON of an error answer.
func Body(code, message, traceID string) []byte {
	b, _ := json.Marshal(struct {
		Error detail `json:"error"`
	}{detail{code, message, traceID}})
	return b
}

// Write answers ctx with e in API.md's error shape, replacing any body.
func Write(ctx *fasthttp.RequestCtx, traceID string, e *Error) {
	writeJSON(ctx, e.Status, Body(e.Code, e.Message, traceID))
}

// WriteFallback is API.md's fallback answer of the gateway: 503 with the
// original system's fields and the common error shape under "error".
func WriteFallback(ctx *fasthttp.RequestCtx, traceID string) {
	const msg = "Upstream service unavailable"
	b, _ := json.Marshal(struct {
		Status  string `json:"status"`
		Message string `json:"message"`
		TraceID string `json:"traceId"`
		Error   detail `json:"error"`
	}{"SERVICE_UNAVAILABLE", msg, traceID, detail{Unavailable, msg + "; try again shortly", traceID}})
	writeJSON(ctx, fasthttp.StatusServiceUnavailable, b)
	ctx.Response.Header.Set("Retry-After", "1")
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, b []byte) {
	ctx.Response.ResetBody()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json; charset=utf-8")
	ctx.SetBody(b)
}

// Transport is the answer to a request fasthttp could not read (a server's
// ErrorHandler): too large, headers too large, too slow, or malformed.
func Transport(err error) *Error {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return ErrTooLarge
	case errors.As(err, &small):
		return &Error{fasthttp.StatusRequestHeaderFieldsTooLarge, HeaderTooLarge, "the request headers are too large"}
	case errors.As(err, &ne) && ne.Timeout():
		return &Error{fasthttp.StatusRequestTimeout, Timeout, "the request was not received in time"}
	}
	return &Error{fasthttp.StatusBadRequest, BadRequest, "malformed HTTP request"}
}
