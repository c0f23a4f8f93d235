package gateway

import (
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"
)

// healthPath is the master's health endpoint: 200 when it and its store are
// up (API.md, Workers and health).
const healthPath = "/api/monitor/health"

// checkFailThreshold consecutive failed checks mark an instance unhealthy; a
// refused connection does at once. One passing check marks it healthy.
const checkFailThreshold = 2

// healthLoop checks every instance each HealthInterval until Shutdown.
func (g *Gateway) healthLoop() {
	defer g.bg.Done()
	t := time.NewTicker(g.cfg.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			for _, up := range g.routes.Load().all {
				g.checkSoon(up)
			}
		}
	}
}

// checkSoon checks up in the background, unless a check of it is running.
func (g *Gateway) checkSoon(up *upstream) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped || !up.checking.CompareAndSwap(false, true) {
		return
	}
	g.checks.Add(1)
	go func() {
		defer g.checks.Done()
		defer up.checking.Store(false)
		g.check(up)
	}()
}

// check runs one active health check of up and records its verdict.
func (g *Gateway) check(up *upstream) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetRequestURI(healthPath)
	req.Header.SetHost(up.host)
	req.UseHostHeader = true
	req.Header.Set("X-Trace-Id", "gateway-health-check")
	req.Header.Set("Accept", "application/json")
	g.sign(req, "", identity{}) // so a master that checks Host knows it is this gateway
	err := up.hc.DoTimeout(req, resp, g.cfg.HealthTimeout)
	up.lastCheck.Store(time.Now().UnixNano())
	if err == nil && resp.StatusCode() == fasthttp.StatusOK {
		up.checkFails.Store(0)
		up.lastError.Store(nil)
		if up.ejectConnect.Load() && up.ejectedUntil.Load() != 0 {
			// It was ejected for refusing connections and answers again:
			// it came back (a restart), no need to wait out the ejection.
			up.ejectedUntil.Store(0)
			up.ejections.Store(0)
			up.ejectConnect.Store(false)
		}
		if !up.healthy.Swap(true) {
			g.log.Info().Str("upstream", up.URL).Str("service", up.Service).Msg("upstream healthy again")
		}
		return
	}
	why := ""
	if err != nil {
		why = err.Error()
	} else {
		why = fmt.Sprintf("health answered %d", resp.StatusCode())
	}
	up.lastError.Store(&why)
	n := up.checkFails.Add(1)
	var de *dialError
	if n >= checkFailThreshold || errors.As(err, &de) {
		if up.healthy.Swap(false) {
			g.log.Warn().Str("upstream", up.URL).Str("service", up.Service).Str("reason", why).Msg("upstream unhealthy")
		}
	}
}

// observe is the passive side (outlier ejection): f is 0 for a request that
// got an answer. A refused connection ejects at once; EjectAfter
// consecutive failures eject; each consecutive ejection doubles its length
// up to MaxEjectFor.
func (g *Gateway) observe(up *upstream, f failure) {
	if f == 0 {
		// Reads first: the common case writes nothing shared.
		if up.fails.Load() != 0 {
			up.fails.Store(0)
		}
		if until := up.ejectedUntil.Load(); until != 0 && time.Now().UnixNano() >= until {
			// Served again after its ejection: the back-off starts over.
			up.ejectedUntil.Store(0)
			up.ejections.Store(0)
		}
		return
	}
	if f == failError && up.fails.Add(1) < int32(g.cfg.EjectAfter) {
		return
	}
	now := time.Now()
	if until := up.ejectedUntil.Load(); until != 0 && now.UnixNano() < until {
		return // already ejected
	}
	k := up.ejections.Add(1)
	d := g.cfg.EjectFor
	for i := int32(1); i < k && d < g.cfg.MaxEjectFor; i++ {
		d *= 2
	}
	d = min(d, g.cfg.MaxEjectFor)
	up.fails.Store(0)
	up.ejectConnect.Store(f == failConnect)
	up.ejectedUntil.Store(now.Add(d).UnixNano())
	up.met.Ejected()
	g.log.Warn().Str("upstream", up.URL).Str("service", up.Service).Dur("for", d).
		Bool("connectionRefused", f == failConnect).Msg("upstream ejected")
	if f == failConnect {
		g.checkSoon(up)
	}
}
