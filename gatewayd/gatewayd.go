// Package gatewayd composes a gateway from a Config, as masterd composes a
// master: it connects to Redis for a shared rate limit, listens, builds the
// proxy (package gateway), gives it its static routes and the Nacos watch
// (package discovery), and serves; Close stops them in the reverse order.
// cmd/rlsched only parses flags into a Config; `rlsched gateway` and
// `rlsched up` start a gateway the same way.
//
// What it must never do: hold logic of a room (routing, auth, rate limits
// belong to the proxy; discovery to its package): it only builds the rooms
// and connects them, in the order written here.
package gatewayd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/gateway"
	"github.com/rlsched/rlsched/gateway/discovery"
)

// Config is the settings of a gateway. cmd/rlsched binds one flag (and
// environment variable) to each; the proxy's own settings are in Proxy.
type Config struct {
	Bind string // RLSCHED_BIND: the address the gateway listens on
	Port int    // GATEWAY_PORT (0: a free port)
	// Masters (GATEWAY_MASTERS) and CanaryMasters (GATEWAY_CANARY_MASTERS)
	// are static routes, http://host:port each, to the services
	// discovery.ServiceStable and discovery.ServiceCanary.
	Masters, CanaryMasters []string
	// Nacos (NACOS_*): when Nacos.Addr is set, the masters registered there
	// are routes too.
	Nacos discovery.Options
	// RedisAddr (REDIS_ADDR), with the rate limit on, shares the limit with
	// the other gateways; empty: each gateway limits alone.
	RedisAddr string
	// Proxy is the proxy's settings (gateway.Config: secrets, rate limit,
	// canary, fallback, health checks, public names). Start fills in Redis
	// from RedisAddr, Logger, and Name when empty (host:port).
	Proxy  gateway.Config
	Logger zerolog.Logger
}

// A ConfigError is a Config that cannot work as given: no masters at all, a
// static master that is no URL. cmd/rlsched answers it as a usage error.
type ConfigError struct{ error }

func (e ConfigError) Unwrap() error { return e.error }

// Gateway is a started gateway. Its methods are safe for concurrent use.
type Gateway struct {
	proxy    *gateway.Gateway
	ln       net.Listener
	url      string
	watcher  *discovery.Watcher // nil without NACOS_ADDR
	redis    rueidis.Client     // nil without REDIS_ADDR or without the rate limit
	serveErr chan error
}

// Start starts a gateway; on error everything started is stopped again.
// Nothing it starts waits on ctx: it takes one as masterd.Start does, so
// both are started alike.
func Start(_ context.Context, cfg Config) (*Gateway, error) {
	if len(cfg.Proxy.JWTSecret) == 0 {
		return nil, errors.New("JWT_SECRET is not set: give the gateway the masters' secret (rlsched up generates one)")
	}
	if len(cfg.Proxy.SharedSecret) == 0 {
		return nil, errors.New("GATEWAY_SHARED_SECRET is not set: give the gateway and the masters the same secret of at least 16 bytes")
	}
	if len(cfg.Masters)+len(cfg.CanaryMasters) == 0 && cfg.Nacos.Addr == "" {
		return nil, ConfigError{errors.New("no masters: give --masters http://host:port[,...] and/or NACOS_ADDR")}
	}
	log := cfg.Logger
	g := &Gateway{serveErr: make(chan error, 1)}
	ok := false
	defer func() {
		if !ok {
			g.Close(context.Background())
		}
	}()
	var err error
	if cfg.RedisAddr != "" && !cfg.Proxy.RateLimitDisabled {
		g.redis, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{cfg.RedisAddr}, DisableCache: true})
		if err != nil {
			return nil, fmt.Errorf("cannot reach Redis at %s for the rate limit: %w", cfg.RedisAddr, err)
		}
	}
	g.ln, err = net.Listen("tcp", net.JoinHostPort(cfg.Bind, strconv.Itoa(cfg.Port)))
	if err != nil {
		return nil, fmt.Errorf("cannot listen on gateway port %d: %w", cfg.Port, err)
	}
	pc := cfg.Proxy
	pc.Redis, pc.Logger = g.redis, log
	if pc.Name == "" {
		host, _ := os.Hostname()
		pc.Name = host + ":" + strconv.Itoa(g.ln.Addr().(*net.TCPAddr).Port)
	}
	if g.proxy, err = gateway.New(pc); err != nil {
		return nil, err
	}
	if err := staticRoutes(g.proxy, discovery.ServiceStable, cfg.Masters); err != nil {
		return nil, ConfigError{fmt.Errorf("--masters: %w", err)}
	}
	if err := staticRoutes(g.proxy, discovery.ServiceCanary, cfg.CanaryMasters); err != nil {
		return nil, ConfigError{fmt.Errorf("--canary-masters: %w", err)}
	}
	if cfg.Nacos.Addr != "" {
		opts := cfg.Nacos
		opts.Logger = log
		if g.watcher, err = g.proxy.WatchNacos(opts); err != nil {
			return nil, err
		}
	}
	go func() { g.serveErr <- g.proxy.Serve(g.ln) }()
	g.url = "http://" + g.ln.Addr().String()
	log.Info().Str("url", g.url).Strs("masters", cfg.Masters).Strs("canaryMasters", cfg.CanaryMasters).
		Str("nacos", cfg.Nacos.Addr).Bool("redis", g.redis != nil).Msg("gateway started")
	ok = true
	return g, nil
}

// staticRoutes are the routes of the source "static": urls, each an
// instance of service.
func staticRoutes(p *gateway.Gateway, service string, urls []string) error {
	insts := make([]gateway.Instance, 0, len(urls))
	for _, u := range urls {
		insts = append(insts, gateway.Instance{URL: strings.TrimSuffix(u, "/"), Service: service,
			Canary: service == discovery.ServiceCanary})
	}
	return p.SetInstances("static", service, insts)
}

// URL is the gateway's address, http://host:port.
func (g *Gateway) URL() string { return g.url }

// Err receives the proxy's error if it stops serving on its own.
func (g *Gateway) Err() <-chan error { return g.serveErr }

// Close stops the gateway, last started first: discovery (no route changes
// while stopping), the proxy, Redis. ctx is not waited on yet: the proxy's
// Shutdown waits for the open requests, each bounded by its upstream
// timeout.
func (g *Gateway) Close(_ context.Context) {
	if g.watcher != nil {
		g.watcher.Close()
	}
	if g.proxy != nil {
		_ = g.proxy.Shutdown()
	} else if g.ln != nil {
		_ = g.ln.Close()
	}
	if g.redis != nil {
		g.redis.Close()
	}
}
