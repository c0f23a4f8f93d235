package obs

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/valyala/fasthttp"
)

// textFormat is the exposition format served: Prometheus' text format,
// which every Prometheus version scrapes and promtool checks.
var textFormat = expfmt.NewFormat(expfmt.TypeTextPlain)

// newHandler serves g in the text format, encoded straight into the
// response body. This is what promhttp does, without fasthttpadaptor's
// translation to net/http (BenchmarkScrape measures both). A gather error
// (a collector's bug) is a 500 naming it, as promhttp answers by default.
func newHandler(g prometheus.Gatherer) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		mfs, err := g.Gather()
		if err != nil {
			ctx.Error("cannot gather metrics: "+err.Error(), fasthttp.StatusInternalServerError)
			return
		}
		ctx.SetContentType(string(textFormat))
		enc := expfmt.NewEncoder(ctx, textFormat)
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				ctx.Error("cannot encode metrics: "+err.Error(), fasthttp.StatusInternalServerError)
				return
			}
		}
	}
}
