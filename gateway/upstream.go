package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlsched/rlsched/internal/obs"
	"github.com/valyala/fasthttp"
)

// Instance is one master as a source of routes (a static list, Nacos)
// reports it.
type Instance struct {
	// URL is the master's REST base, http://host:port.
	URL string
	// Service is the name the instance is known by, e.g. rl-master; it is
	// what X-Upstream-Service answers.
	Service string
	// Canary marks a canary instance: its service is rl-master-canary, or
	// its metadata says canary=true.
	Canary bool
	// Down: the registry itself reports the instance unhealthy or disabled.
	Down bool
	// Metadata from the registry, shown by the routes endpoint.
	Metadata map[string]string
}

// upstream is one instance as the gateway uses it: a keep-alive pool and
// its health. Everything mutable is atomic: requests and the health checker
// touch it concurrently.
type upstream struct {
	// URL, Service and Canary are the identity; Down and Metadata of the
	// embedded Instance are not used (see down and meta).
	Instance
	down   atomic.Bool
	meta   atomic.Pointer[map[string]string]
	source string
	addr   string // host:port
	host   string // the URL's host, sent as Host
	hc     *fasthttp.HostClient
	conns  *connTracker
	met    *obs.Upstream // this instance's attempts and ejections
	svc    *obs.Service  // the requests its service answered

	checking   atomic.Bool  // a check is running
	healthy    atomic.Bool  // verdict of the active checks; true until one fails
	checkFails atomic.Int32 // consecutive failed checks
	lastCheck  atomic.Int64 // unix ns of the last check
	lastError  atomic.Pointer[string]

	fails        atomic.Int32 // consecutive failed requests
	ejectedUntil atomic.Int64 // unix ns; 0 when not ejected
	ejections    atomic.Int32 // consecutive ejections, for the back-off
	ejectConnect atomic.Bool  // the ejection was for refused connections
}

// ejectCause says why a request failed, for the outlier detector.
type failure uint8

const (
	failConnect failure = iota + 1 // the connection was refused or could not be made
	failError                      // timed out or broke after the request was sent
)

// parseUpstreamURL checks an instance URL and returns host:port. Masters
// speak plain HTTP (TLS ends at the gateway or before it).
func parseUpstreamURL(raw string) (addr string, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", fmt.Errorf("upstream %q: want http://host:port", raw)
	}
	addr = u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return addr, nil
}

func (g *Gateway) newUpstream(source string, in Instance) (*upstream, error) {
	addr, err := parseUpstreamURL(in.URL)
	if err != nil {
		return nil, err
	}
	up := &upstream{Instance: Instance{URL: in.URL, Service: in.Service, Canary: in.Canary}, source: source, addr: addr}
	if u, err := url.Parse(in.URL); err == nil {
		up.host = u.Host
	}
	up.setRegistryView(in)
	up.met, up.svc = g.obs.Upstream(in.URL, in.Service), g.obs.Service(in.Service)
	up.conns = &connTracker{conns: map[netip.AddrPort]*upConn{}, dialTimeout: min(g.cfg.UpstreamTimeout, 3*time.Second)}
	up.hc = &fasthttp.HostClient{
		Addr:                     addr,
		Name:                     "rlsched-gateway",
		NoDefaultUserAgentHeader: true,
		Dial:                     up.conns.dial,
		MaxConns:                 4096,
		// Below the masters' idle timeout (2 min), so a pooled connection
		// is not closed by the master under a request.
		MaxIdleConnDuration: 30 * time.Second,
		// Retries are the gateway's own decision (across instances).
		MaxIdemponentCallAttempts: 1,
		ReadBufferSize:            16 << 10,
		WriteBufferSize:           16 << 10,
		// The request line travels as the client sent it: the master routes
		// and the signature covers the original path.
		DisablePathNormalizing: true,
		MaxConnWaitTimeout:     g.cfg.UpstreamTimeout,
	}
	up.healthy.Store(true)
	return up, nil
}

func (up *upstream) setRegistryView(in Instance) {
	up.down.Store(in.Down)
	m := in.Metadata
	up.meta.Store(&m)
}

// available reports whether the instance may take requests now.
func (up *upstream) available(now int64) bool {
	if up.down.Load() || !up.healthy.Load() {
		return false
	}
	until := up.ejectedUntil.Load()
	return until == 0 || now >= until
}

// routeTable is an immutable snapshot of the routes; a change builds a new
// one (Gateway.routes).
type routeTable struct {
	stable, canary []*upstream
	all            []*upstream // sorted by service, then URL
}

// pick chooses an available instance of the canary or stable pool, round
// robin from rr, skipping tried. When the canary pool has none it falls back
// to the stable one; when no instance is available at all it tries any one
// not tried yet ("panic routing": the checks may be wrong, and a dead one
// fails fast).
func (t *routeTable) pick(canary bool, rr uint64, now int64, tried []*upstream) *upstream {
	pools := [2][]*upstream{t.stable, nil}
	if canary {
		pools = [2][]*upstream{t.canary, t.stable}
	}
	for _, pool := range pools {
		if up := pickFrom(pool, rr, func(up *upstream) bool { return up.available(now) && !contains(tried, up) }); up != nil {
			return up
		}
	}
	for _, pool := range pools {
		if up := pickFrom(pool, rr, func(up *upstream) bool { return !up.down.Load() && !contains(tried, up) }); up != nil {
			return up
		}
	}
	return nil
}

func pickFrom(pool []*upstream, rr uint64, ok func(*upstream) bool) *upstream {
	n := uint64(len(pool))
	for i := uint64(0); i < n; i++ {
		if up := pool[(rr+i)%n]; ok(up) {
			return up
		}
	}
	return nil
}

func contains(list []*upstream, up *upstream) bool {
	for _, u := range list {
		if u == up {
			return true
		}
	}
	return false
}

// SetInstances replaces the instances that source (e.g. "static", "nacos")
// reports for service, and rebuilds the routes. Instances already known keep
// their connection pools and health. Safe to call from any goroutine.
func (g *Gateway) SetInstances(source, service string, insts []Instance) error {
	g.routesMu.Lock()
	defer g.routesMu.Unlock()
	key := source + "\x00" + service
	var bad []string
	var ok []Instance
	for _, in := range insts {
		if in.Service == "" {
			in.Service = service
		}
		if _, err := parseUpstreamURL(in.URL); err != nil {
			bad = append(bad, err.Error())
			continue
		}
		ok = append(ok, in)
	}
	g.sources[key] = ok
	g.rebuildLocked()
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// rebuildLocked builds a new routeTable from g.sources, reusing upstreams
// whose identity (source, URL, service, canary) did not change.
func (g *Gateway) rebuildLocked() {
	old := g.routes.Load()
	prev := map[string]*upstream{}
	if old != nil {
		for _, up := range old.all {
			prev[upKey(up.source, up.Instance)] = up
		}
	}
	t := &routeTable{}
	seen := map[string]bool{}
	var added []*upstream
	for key, insts := range g.sources {
		source, _, _ := strings.Cut(key, "\x00")
		for _, in := range insts {
			k := upKey(source, in)
			if seen[k] {
				continue
			}
			seen[k] = true
			up := prev[k]
			if up != nil {
				up.setRegistryView(in)
			} else {
				var err error
				if up, err = g.newUpstream(source, in); err != nil {
					continue // checked in SetInstances
				}
				added = append(added, up)
			}
			t.all = append(t.all, up)
		}
	}
	sort.Slice(t.all, func(i, j int) bool {
		a, b := t.all[i], t.all[j]
		if a.Service != b.Service {
			return a.Service < b.Service
		}
		return a.URL < b.URL
	})
	for _, up := range t.all {
		if up.Canary {
			t.canary = append(t.canary, up)
		} else {
			t.stable = append(t.stable, up)
		}
	}
	g.routes.Store(t)
	if old != nil {
		urls := map[string]bool{}
		for _, up := range t.all {
			urls[up.URL] = true
		}
		for _, up := range old.all {
			if !seen[upKey(up.source, up.Instance)] {
				up.hc.CloseIdleConnections()
				if !urls[up.URL] { // gone from every source: its series go too
					g.obs.ForgetUpstream(up.URL)
				}
				g.log.Info().Str("upstream", up.URL).Str("service", up.Service).Str("source", up.source).Msg("route removed")
			}
		}
	}
	for _, up := range added {
		g.log.Info().Str("upstream", up.URL).Str("service", up.Service).Str("source", up.source).
			Bool("canary", up.Canary).Msg("route added")
		g.checkSoon(up)
	}
}

// upstreamStates reports the route table at scrape time (obs.GatewaySources).
func (g *Gateway) upstreamStates(emit func(obs.UpstreamState)) {
	now := time.Now().UnixNano()
	for _, up := range g.routes.Load().all {
		emit(obs.UpstreamState{URL: up.URL, Service: up.Service, Canary: up.Canary,
			Available: up.available(now), Conns: up.conns.count()})
	}
}

func upKey(source string, in Instance) string {
	c := "0"
	if in.Canary {
		c = "1"
	}
	return source + "\x00" + in.Service + "\x00" + in.URL + "\x00" + c
}

// connTracker dials an upstream's connections and finds them again by local
// address, so a response whose body is streamed can switch its connection
// from the header deadline to an idle deadline per read (upConn).
type connTracker struct {
	dialTimeout time.Duration
	mu          sync.Mutex
	conns       map[netip.AddrPort]*upConn
}

// dialError marks a connection that could not be made: nothing was sent, so
// any request may go to another instance.
type dialError struct{ err error }

func (e *dialError) Error() string { return "cannot connect to the upstream: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

func (t *connTracker) dial(addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: t.dialTimeout, KeepAlive: 30 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, &dialError{err}
	}
	uc := &upConn{Conn: c, t: t}
	if ta, ok := c.LocalAddr().(*net.TCPAddr); ok {
		uc.key = ta.AddrPort()
		t.mu.Lock()
		t.conns[uc.key] = uc
		t.mu.Unlock()
	}
	return uc, nil
}

// stream switches the connection whose local address is laddr to per-read
// idle deadlines of idle, until fasthttp sets its next deadline.
func (t *connTracker) stream(laddr net.Addr, idle time.Duration) {
	ta, ok := laddr.(*net.TCPAddr)
	if !ok {
		return
	}
	t.mu.Lock()
	uc := t.conns[ta.AddrPort()]
	t.mu.Unlock()
	if uc != nil {
		uc.idle.Store(int64(idle))
	}
}

func (t *connTracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// staleConnError: a pooled connection turned out closed by the upstream
// before the request was written; nothing was sent, so any request may be
// tried again.
type staleConnError struct{}

func (staleConnError) Error() string {
	return "the pooled connection was closed by the upstream; nothing was sent"
}

// upConn is a connection to an upstream. fasthttp gives each request an
// absolute deadline (the fallback timeout), which would also cut a long
// body; once the gateway has the headers of a streamed response it sets idle,
// and each Read then pushes the deadline idle further.
type upConn struct {
	net.Conn
	t    *connTracker
	key  netip.AddrPort
	idle atomic.Int64 // ns; 0: fasthttp's deadlines apply
	// used: a response was read, so the next Write starts a request on a
	// pooled connection, which is checked first (a master that died
	// leaves its idle connections in the pool).
	used  atomic.Bool
	close sync.Once
}

func (c *upConn) Write(p []byte) (int, error) {
	if c.used.Swap(false) && peerGone(c.Conn) {
		return 0, staleConnError{}
	}
	return c.Conn.Write(p)
}

func (c *upConn) SetReadDeadline(d time.Time) error {
	c.idle.Store(0)
	return c.Conn.SetReadDeadline(d)
}

func (c *upConn) SetDeadline(d time.Time) error {
	c.idle.Store(0)
	return c.Conn.SetDeadline(d)
}

func (c *upConn) Read(p []byte) (int, error) {
	if idle := c.idle.Load(); idle > 0 {
		_ = c.Conn.SetReadDeadline(time.Now().Add(time.Duration(idle)))
	}
	n, err := c.Conn.Read(p)
	if n > 0 && !c.used.Load() {
		c.used.Store(true)
	}
	return n, err
}

func (c *upConn) Close() error {
	c.close.Do(func() {
		if c.key.IsValid() {
			c.t.mu.Lock()
			if c.t.conns[c.key] == c {
				delete(c.t.conns, c.key)
			}
			c.t.mu.Unlock()
		}
	})
	return c.Conn.Close()
}
