package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/gateway"
)

// BenchmarkProxy measures a GET through an in-process gateway with every
// filter on (token, signing, canary choice, metrics) to a trivial upstream,
// over real loopback connections.
func BenchmarkProxy(b *testing.B) {
	body := []byte(`{"items":[]}`)
	up := upstream(b, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	})
	_, gwURL := startGW(b, gateway.Config{HealthInterval: time.Hour, CanaryUserIDs: []string{"999"}, CanaryPercent: 10},
		[]string{up}, nil)
	tok := "Bearer " + testToken(b, 1, "alice", "USER")
	hc := &fasthttp.HostClient{Addr: strings.TrimPrefix(gwURL, "http://"), MaxConns: 256}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		for pb.Next() {
			req.SetRequestURI(gwURL + "/api/workers")
			req.Header.Set("Authorization", tok)
			if err := hc.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Fatalf("%v %d", err, resp.StatusCode())
			}
			b.SetBytes(int64(len(resp.Body())))
		}
	})
}
