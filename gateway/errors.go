package gateway

import (
	"encoding/json"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/internal/apierr"
)

// writeError answers in API.md's error shape (internal/apierr).
func writeError(ctx *fasthttp.RequestCtx, trace string, status int, code, message string) {
	apierr.Write(ctx, trace, &apierr.Error{Status: status, Code: code, Message: message})
}

// writeJSON answers with v as JSON.
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = apierr.Body(apierr.Internal, "cannot encode the answer", "")
		status = fasthttp.StatusInternalServerError
	}
	ctx.Response.ResetBody()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json; charset=utf-8")
	ctx.SetBody(b)
}
