package obs

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rlsched/rlsched/core"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// BenchmarkHotPath is the cost of each typed method, from every core at
// once (the counters are shared, as in the master).
func BenchmarkHotPath(b *testing.B) {
	m := NewMasterMetrics(MasterMetricsOptions{})
	g := NewGatewayMetrics(GatewayMetricsOptions{})
	route := m.Route("/api/tasks/{id}")
	svc := g.Service("rl-master")
	up := g.Upstream("http://10.0.0.1:8082", "rl-master")
	f := func(name string, call func()) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					call()
				}
			})
		})
	}
	f("Heartbeat", m.Heartbeat)
	f("RunMoved", func() { m.RunMoved(core.StatusQueued, core.StatusDispatched, time.Second) })
	f("RunFinished", func() { m.RunFinished(core.StatusSucceeded) })
	f("Dispatched", func() { m.Dispatched(3 * time.Second) })
	f("StoreCommit", func() { m.StoreCommit(2*time.Millisecond, 32) })
	f("Route.Observe", func() { route.Observe(200, 3*time.Millisecond) })
	f("Service.Request", func() { svc.Request(GatewayAPI, 200, 3*time.Millisecond) })
	f("Upstream.Attempt", func() { up.Attempt(AttemptOK, 3*time.Millisecond) })
}

// BenchmarkScrape is the cost of one /metrics answer on a farm of 64
// workers with 8 GPUs each and 40 routes in use: the handler served here
// (expfmt into the fasthttp body) against promhttp behind
// fasthttpadaptor, the other way to serve the same registry.
func BenchmarkScrape(b *testing.B) {
	m := exercisedMaster(b)
	for i := range 40 {
		m.Route(fmt.Sprintf("/api/route%d/{id}", i)).Observe(200, time.Millisecond)
	}
	src := *m.src.Load()
	src.GPUUtilization = func(emit func(string, int, float64)) {
		for w := range 64 {
			for g := range 8 {
				emit(fmt.Sprintf("gpu%02d-3f9a2c", w), g, float64(g)/8)
			}
		}
	}
	m.SetSources(src)
	f := func(name string, h fasthttp.RequestHandler) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var ctx fasthttp.RequestCtx
			for b.Loop() {
				ctx.Request.Reset()
				ctx.Response.Reset()
				ctx.Request.SetRequestURI("/metrics")
				h(&ctx)
			}
			if ctx.Response.StatusCode() != 200 {
				b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
			}
			b.SetBytes(int64(len(ctx.Response.Body())))
		})
	}
	f("expfmt", m.Handler())
	f("promhttp+adaptor", fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{})))
}
