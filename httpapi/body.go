package httpapi

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/internal/apierr"
	"github.com/rlsched/rlsched/internal/clip"
)

// MaxSubmitBodySize bounds a submission's body once inflated: a run's code
// diff may be 2 MiB (core.MaxCodeDiffBytes), more once JSON-escaped, and
// still reach the master through the 1 MiB a body may have on the wire
// (MaxBodySize, here and at the gateway) when it is sent gzip-compressed.
const MaxSubmitBodySize = 4 << 20

// inflateBody replaces a body sent with Content-Encoding: gzip by its
// inflated bytes, at most limit of them, so that handlers read JSON either
// way. Other encodings are refused: 415.
func inflateBody(req *fasthttp.Request, limit int) *apiError {
	enc := strings.ToLower(strings.TrimSpace(string(req.Header.ContentEncoding())))
	switch enc {
	case "", "identity":
		return nil
	case "gzip", "x-gzip":
	default:
		return &apiError{fasthttp.StatusUnsupportedMediaType, apierr.UnsupportedMedia,
			fmt.Sprintf("Content-Encoding %q is not supported: send the body as is or gzip-compressed", clip.String(enc, 32))}
	}
	body := req.Body()
	if len(body) == 0 {
		req.Header.Del(fasthttp.HeaderContentEncoding)
		return nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return errBadRequest("the body is not gzip data, as its Content-Encoding says: %v", err)
	}
	// One byte past the limit tells a body at the limit from a larger one;
	// a small body that inflates without end stops there.
	out, err := io.ReadAll(io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return errBadRequest("the body's gzip data is damaged: %v", err)
	}
	if len(out) > limit {
		return &apiError{fasthttp.StatusRequestEntityTooLarge, apierr.PayloadTooLarge,
			fmt.Sprintf("the request body inflates to more than %d bytes (%d MiB); send less", limit, limit>>20)}
	}
	req.SetBody(out)
	req.Header.Del(fasthttp.HeaderContentEncoding)
	return nil
}
