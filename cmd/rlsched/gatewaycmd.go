package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/gateway"
	"github.com/rlsched/rlsched/gateway/discovery"
	"github.com/rlsched/rlsched/gatewayd"
	"github.com/rlsched/rlsched/internal/crosssite"
	"github.com/rlsched/rlsched/masterd"
)

// gatewayOpts are the settings of `rlsched gateway` (API.md, Configuration).
// The two secrets come from the environment only and have no default.
type gatewayOpts struct {
	bind                        string
	port                        int
	masters, canaryMasters      string
	nacos                       nacosOpts
	jwtEnforce                  bool
	rateLimit                   bool
	rateWindow, rateMax         int
	redisAddr, redisPrefix      string
	fallback                    bool
	fallbackMS                  int
	canaryUsers                 string
	canaryPercent               int
	healthIntervalMS, ejectSecs int
	name                        string
	publicHosts                 string
	jwtSecret, sharedSecret     string
	tlsProxy                    bool
}

// nacosOpts connect to Nacos; the password is read from NACOS_PASSWORD only.
type nacosOpts struct {
	addr, username, password, namespace, group string
}

func (o *nacosOpts) define(f envFlags) {
	f.str(&o.addr, "nacos-addr", "NACOS_ADDR", "", "Nacos server(s), host:port[,host:port...] (empty: no Nacos)")
	f.str(&o.username, "nacos-username", "NACOS_USERNAME", "", "Nacos user, when the server has auth on (password: env NACOS_PASSWORD)")
	f.str(&o.namespace, "nacos-namespace", "NACOS_NAMESPACE", "", "Nacos namespace id (empty: public)")
	f.str(&o.group, "nacos-group", "NACOS_GROUP", "DEFAULT_GROUP", "Nacos group")
	o.password = os.Getenv("NACOS_PASSWORD")
}

func (o nacosOpts) options(log zerolog.Logger) discovery.Options {
	return discovery.Options{Addr: o.addr, Username: o.username, Password: o.password,
		Namespace: o.namespace, Group: o.group, Logger: log}
}

// define adds the gateway's flags. forUp leaves out what `rlsched up` takes
// from its master (bind address, Redis) or does not use (upstream lists,
// Nacos).
func (o *gatewayOpts) define(f envFlags, forUp bool) {
	if !forUp {
		f.str(&o.bind, "bind", "RLSCHED_BIND", "127.0.0.1", "address to listen on; 0.0.0.0: all interfaces")
		envBool(f, &o.tlsProxy, "tls-proxy", "RLSCHED_TLS_PROXY", false,
			"a proxy in front ends TLS (nginx, docs/deploy.md): bind to all interfaces without a warning")
		f.str(&o.masters, "masters", "GATEWAY_MASTERS", "", "static masters, http://host:port[,...] (service "+discovery.ServiceStable+")")
		f.str(&o.canaryMasters, "canary-masters", "GATEWAY_CANARY_MASTERS", "", "static canary masters, http://host:port[,...] (service "+discovery.ServiceCanary+")")
		o.nacos.define(f)
		f.str(&o.redisAddr, "redis-addr", "REDIS_ADDR", "", "Redis address: share the rate limit with the other gateways (empty: per gateway)")
		f.str(&o.redisPrefix, "redis-prefix", "REDIS_PREFIX", "rlsched", "prefix of every Redis key")
		f.str(&o.name, "name", "GATEWAY_NAME", "", "name of this gateway in logs and health (default host:port)")
		f.str(&o.publicHosts, "public-hosts", "PUBLIC_HOSTS", "", "more names (host or host:port, comma-separated) the gateway answers to besides localhost and the bound address; others are refused 421 (DNS rebinding); * turns the check off")
	}
	f.int(&o.port, "gateway-port", "GATEWAY_PORT", 8081, "gateway port (0: any free port)")
	envBool(f, &o.jwtEnforce, "jwt-enforce", "JWT_ENFORCE", true, "refuse requests without a valid token (except public paths)")
	// Off by default under `up`: one lab machine whose users submit sweeps
	// from scripts; a shared gateway limits by default.
	envBool(f, &o.rateLimit, "rate-limit-enabled", "RATE_LIMIT_ENABLED", !forUp, "limit submissions (POST /api/train and reruns) per user, else per IP")
	f.int(&o.rateWindow, "rate-limit-window-seconds", "RATE_LIMIT_WINDOW_SECONDS", 10, "rate-limit window")
	f.int(&o.rateMax, "rate-limit-max-requests", "RATE_LIMIT_MAX_REQUESTS", 3, "submissions allowed per window")
	envBool(f, &o.fallback, "fallback-enabled", "FALLBACK_ENABLED", true, "answer 503 SERVICE_UNAVAILABLE when no master answers (else 502/504)")
	f.int(&o.fallbackMS, "fallback-timeout-ms", "FALLBACK_TIMEOUT_MS", 5000, "wait at most this long for a master's answer")
	f.str(&o.canaryUsers, "canary-user-ids", "CANARY_USER_IDS", "", "user ids routed to the canary, comma-separated")
	f.int(&o.canaryPercent, "canary-percent", "CANARY_PERCENT", 0, "percentage of users (else requests) routed to the canary, 0..100")
	f.int(&o.healthIntervalMS, "health-interval-ms", "GATEWAY_HEALTH_INTERVAL_MS", 5000, "interval of the masters' health checks")
	f.int(&o.ejectSecs, "eject-seconds", "GATEWAY_EJECT_SECONDS", 10, "how long a failing master is ejected at first (doubling while it keeps failing)")
	o.jwtSecret, o.sharedSecret = os.Getenv("JWT_SECRET"), os.Getenv("GATEWAY_SHARED_SECRET")
}

// envBool defines a boolean flag whose default comes from env.
func envBool(f envFlags, p *bool, name, env string, def bool, help string) {
	if v, ok := os.LookupEnv(env); ok {
		if b, err := strconv.ParseBool(strings.TrimSpace(v)); err == nil {
			def = b
		}
	}
	f.BoolVar(p, name, def, help+" (env "+env+")")
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// config is the parsed Config.
func (o gatewayOpts) config(log zerolog.Logger) gatewayd.Config {
	return gatewayd.Config{
		Bind: o.bind, Port: o.port, Masters: splitList(o.masters), CanaryMasters: splitList(o.canaryMasters),
		Nacos: o.nacos.options(log), RedisAddr: o.redisAddr, Logger: log,
		Proxy: gateway.Config{
			JWTSecret: []byte(o.jwtSecret), SharedSecret: []byte(o.sharedSecret), AllowAnonymous: !o.jwtEnforce,
			RateLimitDisabled: !o.rateLimit, RateLimitWindow: seconds(o.rateWindow), RateLimitMax: o.rateMax,
			RedisPrefix: o.redisPrefix, CanaryUserIDs: splitList(o.canaryUsers), CanaryPercent: o.canaryPercent,
			FallbackDisabled: !o.fallback, UpstreamTimeout: time.Duration(o.fallbackMS) * time.Millisecond,
			HealthInterval: time.Duration(o.healthIntervalMS) * time.Millisecond, EjectFor: seconds(o.ejectSecs),
			PublicHosts: crosssite.SplitList(o.publicHosts), Name: o.name,
		},
	}
}

// upConfig is the Config of `rlsched up`'s gateway in front of its master:
// the master's bind address, public names, Redis and JWT secret, and the
// shared secret the master trusts.
func (o gatewayOpts) upConfig(mc masterd.Config, masterURL string, log zerolog.Logger) gatewayd.Config {
	o.bind, o.masters, o.publicHosts = mc.Bind, masterURL, strings.Join(mc.PublicHosts, ",")
	o.redisAddr, o.redisPrefix = mc.RedisAddr, mc.RedisPrefix
	o.jwtSecret, o.sharedSecret = mc.JWTSecret, mc.Gateway.SharedSecret
	return o.config(log)
}

// startGateway is gatewayd.Start, its Config errors answered as usage errors.
func startGateway(ctx context.Context, cfg gatewayd.Config) (*gatewayd.Gateway, error) {
	g, err := gatewayd.Start(ctx, cfg)
	if ce := (gatewayd.ConfigError{}); errors.As(err, &ce) {
		return nil, usageError{err}
	}
	return g, err
}

// runGateway is `rlsched gateway`.
func runGateway(ctx context.Context, args []string) error {
	var o gatewayOpts
	f := newFlags("gateway")
	o.define(f, false)
	if err := f.parse(args); err != nil {
		return err
	}
	log := newLogger()
	g, err := startGateway(ctx, o.config(log))
	if err != nil {
		return err
	}
	defer g.Close(context.Background())
	warnOpenBind(log, "the gateway", g.URL(), o.tlsProxy)
	select {
	case <-ctx.Done():
		log.Info().Msg("shutting down")
		return nil
	case err := <-g.Err():
		return fmt.Errorf("gateway stopped: %w", err)
	}
}
