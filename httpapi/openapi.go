package httpapi

import (
	_ "embed"

	"github.com/valyala/fasthttp"
)

// openAPIDoc is the OpenAPI 3.1 document of this API: every route of
// apiRoutes, with its request and response schemas and the error body.
// openapi_test.go holds it to the router (no route missing, none extra),
// to the JSON of the Go types it describes, and to a real validator.
//
//go:embed openapi.json
var openAPIDoc []byte

// openAPI is GET /api/openapi.json.
func (s *Server) openAPI(r *request) *apiError {
	r.ctx.SetStatusCode(fasthttp.StatusOK)
	r.ctx.SetContentType("application/json; charset=utf-8")
	r.ctx.SetBody(openAPIDoc)
	return nil
}
