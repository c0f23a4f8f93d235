package gateway

import (
	"encoding/json"
	"strconv"

	"github.com/valyala/fasthttp"
)

// Error codes of API.md, and the two a proxy adds when the fallback is off.
const (
	codeBadRequest     = "bad_request"
	codeUnauthorized   = "unauthorized"
	codeForbidden      = "forbidden"
	codeTooLarge       = "payload_too_large"
	codeHeaderTooLarge = "header_too_large"
	codeTimeout        = "request_timeout"
	codeRateLimited    = "rate_limited"
	codeUnavailable    = "unavailable"
	codeBadGateway     = "bad_gateway"
	codeGatewayTimeout = "gateway_timeout"
)

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	TraceID string `json:"traceId"`
}

// writeError answers in API.md's error shape.
func writeError(ctx *fasthttp.RequestCtx, trace string, status int, code, message string) {
	b, _ := json.Marshal(struct {
		Error errorDetail `json:"error"`
	}{errorDetail{code, message, trace}})
	writeJSONBytes(ctx, status, b)
}

// writeFallback is API.md's fallback answer: 503 with the original system's
// fields and the common error shape under "error".
func writeFallback(ctx *fasthttp.RequestCtx, trace string) {
	const msg = "Upstream service unavailable"
	b, _ := json.Marshal(struct {
		Status  string      `json:"status"`
		Message string      `json:"message"`
		TraceID string      `json:"traceId"`
		Error   errorDetail `json:"error"`
	}{"SERVICE_UNAVAILABLE", msg, trace, errorDetail{codeUnavailable, msg + "; try again shortly", trace}})
	writeJSONBytes(ctx, fasthttp.StatusServiceUnavailable, b)
	ctx.Response.Header.Set("Retry-After", "1")
}

func writeJSONBytes(ctx *fasthttp.RequestCtx, status int, b []byte) {
	ctx.Response.ResetBody()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json; charset=utf-8")
	ctx.SetBody(b)
}

// writeJSON answers with v as JSON.
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"error":{"code":"internal","message":"cannot encode the answer"}}`)
		status = fasthttp.StatusInternalServerError
	}
	writeJSONBytes(ctx, status, b)
}

func itoa(n int) string { return strconv.Itoa(n) }
