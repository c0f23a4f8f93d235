package obs

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// GatewayRoute is the route class of a request through the gateway.
type GatewayRoute uint8

// The route classes (the route label of the gateway's request metrics).
const (
	GatewayAPI      GatewayRoute = iota // /api/... needing a token
	GatewaySubmit                       // POST /api/train, the rate-limited route
	GatewayAuth                         // the public API: login, register, logout, health
	GatewayWS                           // /ws
	GatewayUI                           // the dashboard's pages and static files
	GatewayActuator                     // /gateway-actuator/..., answered by the gateway
	nGatewayRoutes
)

var gatewayRouteNames = [nGatewayRoutes]string{"api", "submit", "auth", "ws", "ui", "actuator"}

func (r GatewayRoute) String() string {
	if r < nGatewayRoutes {
		return gatewayRouteNames[r]
	}
	return "GatewayRoute(" + strconv.Itoa(int(r)) + ")"
}

// AttemptResult is how one attempt to reach an upstream instance ended.
type AttemptResult uint8

// The attempt results (the result label of upstream_attempts_total).
const (
	AttemptOK           AttemptResult = iota // an answer came
	AttemptStaleConn                         // a pooled connection was dead; retried on a fresh one
	AttemptPoolFull                          // no connection to the instance was free
	AttemptConnectError                      // the instance refused or could not be reached
	AttemptTimeout                           // no answer within the upstream timeout
	AttemptError                             // any other transport error
	nAttemptResults
)

var attemptResultNames = [nAttemptResults]string{"ok", "stale_conn", "pool_full", "connect_error", "timeout", "error"}

// CanaryReason is why a request went to a canary.
type CanaryReason uint8

// The canary reasons (the reason label of canary_choices_total).
const (
	CanaryHeader  CanaryReason = iota // X-Canary: true
	CanaryUser                        // the user is in CANARY_USER_IDS
	CanaryPercent                     // hash(user or trace) mod 100 < CANARY_PERCENT
	nCanaryReasons
)

var canaryReasonNames = [nCanaryReasons]string{"header", "user", "percent"}

// GatewayMetricsOptions tunes a GatewayMetrics; the zero value is the default.
type GatewayMetricsOptions struct {
	// MaxUpstreams caps the upstream label (default 256 instances); past
	// it instances share the upstream "other". ForgetUpstream frees a slot.
	MaxUpstreams int
	// MaxServices caps the service label (default 16); past it services
	// share the service "other".
	MaxServices int
}

// GatewayMetrics holds one gateway's metrics in its own registry.
//
// Every method is safe from any goroutine; the typed methods cost an
// atomic add or a histogram observation.
type GatewayMetrics struct {
	reg     *prometheus.Registry
	handler fasthttp.RequestHandler
	src     atomic.Pointer[GatewaySources]

	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	upstreamDur *prometheus.HistogramVec
	attempts    *prometheus.CounterVec
	ejections   *prometheus.CounterVec

	canary          [nCanaryReasons]prometheus.Counter
	rateLimited     prometheus.Counter
	rateLimitErrors prometheus.Counter
	authRefused     prometheus.Counter
	fallbacks       prometheus.Counter
	websockets      prometheus.Gauge

	maxUpstreams, maxServices int
	mu                        sync.Mutex
	services                  map[string]*Service  // guarded by mu
	upstreams                 map[string]*Upstream // guarded by mu
}

// NewGatewayMetrics makes a gateway's metrics, with the Go and process
// collectors, in a new registry.
func NewGatewayMetrics(opts GatewayMetricsOptions) *GatewayMetrics {
	if opts.MaxUpstreams <= 0 {
		opts.MaxUpstreams = 256
	}
	if opts.MaxServices <= 0 {
		opts.MaxServices = 16
	}
	reg := newRegistry()
	const ns = "rlsched_gateway"
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help})
		reg.MustRegister(c)
		return c
	}
	g := &GatewayMetrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "requests_total",
			Help: "Requests answered, by route class, status class and upstream service (\"gateway\": answered by the gateway)."},
			[]string{"route", "status_class", "service"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "request_duration_seconds",
			Help:    "Time to answer a request (to the response headers for streamed bodies), by route class and service.",
			Buckets: requestBuckets}, []string{"route", "service"}),
		upstreamDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "upstream_duration_seconds",
			Help:    "Time from sending a request to an upstream instance to its response headers, by service.",
			Buckets: requestBuckets}, []string{"service"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "upstream_attempts_total",
			Help: "Attempts to reach an upstream instance, by result (ok, stale_conn, pool_full, connect_error, timeout, error)."},
			[]string{"upstream", "result"}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "upstream_ejections_total",
			Help: "Times an upstream instance was ejected by outlier detection."}, []string{"upstream"}),
		rateLimited:     counter("rate_limited_total", "Submissions refused with 429."),
		rateLimitErrors: counter("rate_limit_redis_errors_total", "Rate-limit calls to Redis that failed (the local limit decided)."),
		authRefused:     counter("auth_refused_total", "Requests refused (401 or redirect to /login) for want of a valid token."),
		fallbacks:       counter("fallback_total", "Requests no upstream answered (fallback 503, or 502/504)."),
		websockets: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "websockets_active",
			Help: "WebSocket connections being proxied."}),
		maxUpstreams: opts.MaxUpstreams,
		maxServices:  opts.MaxServices,
		services:     map[string]*Service{},
		upstreams:    map[string]*Upstream{},
	}
	canary := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "canary_choices_total",
		Help: "Requests sent to a canary, by reason (header, user, percent)."}, []string{"reason"})
	for i, r := range canaryReasonNames {
		g.canary[i] = canary.WithLabelValues(r)
	}
	reg.MustRegister(g.requests, g.duration, g.upstreamDur, g.attempts, g.ejections, canary, g.websockets,
		&gatewayCollector{g: g})
	g.handler = newHandler(reg)
	return g
}

// Registry is where the gateway's metrics live.
func (g *GatewayMetrics) Registry() *prometheus.Registry { return g.reg }

// Handler serves the registry in Prometheus' text format (GET /metrics).
func (g *GatewayMetrics) Handler() fasthttp.RequestHandler { return g.handler }

// Canary counts a request sent to a canary for reason r.
func (g *GatewayMetrics) Canary(r CanaryReason) {
	if r < nCanaryReasons {
		g.canary[r].Inc()
	}
}

// RateLimited counts a submission refused with 429.
func (g *GatewayMetrics) RateLimited() { g.rateLimited.Inc() }

// RateLimitError counts a rate-limit call to Redis that failed.
func (g *GatewayMetrics) RateLimitError() { g.rateLimitErrors.Inc() }

// AuthRefused counts a request refused for want of a valid token.
func (g *GatewayMetrics) AuthRefused() { g.authRefused.Inc() }

// Fallback counts a request no upstream answered.
func (g *GatewayMetrics) Fallback() { g.fallbacks.Inc() }

// WebSocketOpened and WebSocketClosed bracket one proxied WebSocket.
func (g *GatewayMetrics) WebSocketOpened() { g.websockets.Inc() }

// WebSocketClosed ends what WebSocketOpened began.
func (g *GatewayMetrics) WebSocketClosed() { g.websockets.Dec() }

// Service returns the request metrics of requests answered by the
// upstream service name ("" for those the gateway answers itself: the
// label "gateway"). Call it when the route table is built and keep the
// result; the same name returns the same Service.
func (g *GatewayMetrics) Service(name string) *Service {
	if name == "" {
		name = "gateway"
	} else if !utf8.ValidString(name) { // a label value must be UTF-8
		name = "other"
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, ok := g.services[name]; ok {
		return s
	}
	if len(g.services) >= g.maxServices {
		name = "other"
		if s, ok := g.services[name]; ok {
			return s
		}
	}
	s := &Service{}
	for r := range nGatewayRoutes {
		rn := gatewayRouteNames[r]
		s.duration[r] = g.duration.WithLabelValues(rn, name)
		for c, cn := range statusClasses {
			s.requests[r][c] = g.requests.WithLabelValues(rn, cn, name)
		}
	}
	s.upstream = g.upstreamDur.WithLabelValues(name)
	g.services[name] = s
	return s
}

// Service is the request metrics of one upstream service. Safe from any
// goroutine.
type Service struct {
	requests [nGatewayRoutes][len(statusClasses)]prometheus.Counter
	duration [nGatewayRoutes]prometheus.Observer
	upstream prometheus.Observer
}

// Request records one request of route class r answered with status after d.
func (s *Service) Request(r GatewayRoute, status int, d time.Duration) {
	if r >= nGatewayRoutes {
		r = GatewayAPI
	}
	s.requests[r][classOf(status)].Inc()
	s.duration[r].Observe(d.Seconds())
}

// Upstream returns the metrics of the instance at url, serving service.
// Call it when the instance joins the route table and keep the result.
func (g *GatewayMetrics) Upstream(url, service string) *Upstream {
	svc := g.Service(service)
	g.mu.Lock()
	defer g.mu.Unlock()
	if u, ok := g.upstreams[url]; ok {
		return u
	}
	label := url
	if len(g.upstreams) >= g.maxUpstreams {
		label = "other"
	}
	u := &Upstream{latency: svc.upstream}
	for i, r := range attemptResultNames {
		c, err := g.attempts.GetMetricWithLabelValues(label, r)
		if err != nil { // not UTF-8: a URL from discovery, never trusted to be a label
			label = "other"
			c = g.attempts.WithLabelValues(label, r)
		}
		u.attempts[i] = c
	}
	u.ejections = g.ejections.WithLabelValues(label)
	if label == url {
		g.upstreams[url] = u
	}
	return u
}

// ForgetUpstream drops the series of the instance at url, once it left the
// route table for good, so instances that come and go (new ports, new
// hosts) do not pile up series.
func (g *GatewayMetrics) ForgetUpstream(url string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.upstreams[url]; !ok {
		return
	}
	delete(g.upstreams, url)
	g.attempts.DeletePartialMatch(prometheus.Labels{"upstream": url})
	g.ejections.DeleteLabelValues(url)
}

// Upstream is the metrics of one upstream instance. Safe from any goroutine.
type Upstream struct {
	attempts  [nAttemptResults]prometheus.Counter
	ejections prometheus.Counter
	latency   prometheus.Observer
}

// Attempt counts one attempt that ended with r; d, the time to the
// response headers, is observed for answered attempts (AttemptOK) only, so
// timeouts do not pose as latency.
func (u *Upstream) Attempt(r AttemptResult, d time.Duration) {
	if r >= nAttemptResults {
		r = AttemptError
	}
	u.attempts[r].Inc()
	if r == AttemptOK {
		u.latency.Observe(d.Seconds())
	}
}

// Ejected counts one ejection of the instance by outlier detection.
func (u *Upstream) Ejected() { u.ejections.Inc() }

// GatewaySources are the gateway's callbacks for its gauges, read at each
// scrape; the rules of Sources apply.
type GatewaySources struct {
	// Upstreams calls emit once per instance in the route table.
	Upstreams func(emit func(UpstreamState))
}

// UpstreamState is one instance as the route table has it now.
type UpstreamState struct {
	URL, Service string
	Canary       bool
	// Available: registered, healthy and not ejected.
	Available bool
	// Conns is the number of open connections to it.
	Conns int
}

// SetSources installs the gauges' callbacks, replacing those set before.
func (g *GatewayMetrics) SetSources(s GatewaySources) { g.src.Store(&s) }

var (
	upstreamUpDesc = prometheus.NewDesc("rlsched_gateway_upstream_available",
		"1 when the instance takes requests (registered, healthy, not ejected).",
		[]string{"upstream", "service", "canary"}, nil)
	upstreamConnsDesc = prometheus.NewDesc("rlsched_gateway_upstream_connections",
		"Open connections to the instance.", []string{"upstream", "service"}, nil)
)

// gatewayCollector reports the GatewaySources at scrape time, the first
// MaxUpstreams instances only.
type gatewayCollector struct{ g *GatewayMetrics }

func (c *gatewayCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- upstreamUpDesc
	ch <- upstreamConnsDesc
}

func (c *gatewayCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.g.src.Load()
	if s == nil || s.Upstreams == nil {
		return
	}
	seen := map[string]bool{}
	s.Upstreams(func(u UpstreamState) {
		if seen[u.URL] || len(seen) >= c.g.maxUpstreams {
			return
		}
		up, err := prometheus.NewConstMetric(upstreamUpDesc, prometheus.GaugeValue, b2f(u.Available),
			u.URL, u.Service, strconv.FormatBool(u.Canary))
		if err != nil { // a label that is not UTF-8
			return
		}
		conns, err := prometheus.NewConstMetric(upstreamConnsDesc, prometheus.GaugeValue, float64(u.Conns), u.URL, u.Service)
		if err != nil {
			return
		}
		seen[u.URL] = true
		ch <- up
		ch <- conns
	})
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
