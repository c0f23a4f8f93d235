package gateway

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// metrics are the gateway's Prometheus series, in its own registry (no
// globals: two gateways in one process, as in tests, keep theirs apart).
type metrics struct {
	reg             *prometheus.Registry
	requests        *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	attempts        *prometheus.CounterVec
	ejections       *prometheus.CounterVec
	canary          *prometheus.CounterVec
	rateLimited     prometheus.Counter
	rateLimitErrors prometheus.Counter
	authRefused     prometheus.Counter
	fallbacks       prometheus.Counter
	wsActive        prometheus.Gauge
}

func newMetrics(reg *prometheus.Registry, g *Gateway) (*metrics, error) {
	const ns = "rlsched_gateway"
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "requests_total",
			Help: "Requests answered, by upstream service (empty: answered by the gateway) and status."},
			[]string{"service", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "request_duration_seconds",
			Help:    "Time to answer a request (to the response headers for streamed bodies), by upstream service.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}},
			[]string{"service"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "upstream_attempts_total",
			Help: "Attempts to reach an upstream instance, by result (ok, connect_error, timeout, error, pool_full)."},
			[]string{"upstream", "result"}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "upstream_ejections_total",
			Help: "Times an upstream instance was ejected by outlier detection."}, []string{"upstream"}),
		canary: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "canary_choices_total",
			Help: "Requests chosen for the canary, by reason (header, user, percent)."}, []string{"reason"}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "rate_limited_total",
			Help: "Submissions refused with 429."}),
		rateLimitErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "rate_limit_redis_errors_total",
			Help: "Rate-limit calls to Redis that failed (the local limit decided)."}),
		authRefused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "auth_refused_total",
			Help: "Requests refused (401 or redirect to /login) for want of a valid token."}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "fallback_total",
			Help: "Requests no upstream answered (fallback 503, or 502/504)."}),
		wsActive: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "websockets_active",
			Help: "WebSocket connections being proxied."}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.attempts, m.ejections, m.canary,
		m.rateLimited, m.rateLimitErrors, m.authRefused, m.fallbacks, m.wsActive, upstreamCollector{g}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) handler() fasthttp.RequestHandler {
	return fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
}

func (m *metrics) observe(st *reqState, status int, service string, d time.Duration) {
	if st.kind == pathMetrics {
		return
	}
	m.requests.WithLabelValues(service, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(service).Observe(d.Seconds())
	if st.canary && st.why != "" {
		m.canary.WithLabelValues(st.why).Inc()
	}
}

func (m *metrics) attempt(up *upstream, result string) {
	m.attempts.WithLabelValues(up.URL, result).Inc()
}

// upstreamCollector reports the routes as they stand at scrape time.
type upstreamCollector struct{ g *Gateway }

var (
	upstreamUpDesc = prometheus.NewDesc("rlsched_gateway_upstream_available",
		"1 when the instance takes requests (registered, healthy, not ejected).",
		[]string{"upstream", "service", "canary"}, nil)
	upstreamConnsDesc = prometheus.NewDesc("rlsched_gateway_upstream_connections",
		"Open connections to the instance.", []string{"upstream", "service"}, nil)
)

func (c upstreamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- upstreamUpDesc
	ch <- upstreamConnsDesc
}

func (c upstreamCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now().UnixNano()
	for _, up := range c.g.routes.Load().all {
		v := 0.0
		if up.available(now) {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(upstreamUpDesc, prometheus.GaugeValue, v, up.URL, up.Service, strconv.FormatBool(up.Canary))
		ch <- prometheus.MustNewConstMetric(upstreamConnsDesc, prometheus.GaugeValue, float64(up.conns.count()), up.URL, up.Service)
	}
}
