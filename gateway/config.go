package gateway

import (
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"
	"github.com/rlsched/rlsched/internal/obs"
	"github.com/rs/zerolog"
)

// Config of a Gateway. The zero value of every field but the two secrets is
// API.md's default: JWT enforced, rate limit on (3 submissions per 10 s, kept
// in this process), fallback on after 5 s, no canary percentage.
type Config struct {
	// JWTSecret verifies tokens (HS256 only); the masters' JWT_SECRET.
	JWTSecret []byte
	// SharedSecret signs the identity headers (GATEWAY_SHARED_SECRET); the
	// masters check it.
	SharedSecret []byte
	// AllowAnonymous forwards requests without a valid token to non-public
	// paths too (JWT_ENFORCE=false); the masters then check tokens themselves.
	AllowAnonymous bool

	// RateLimitDisabled turns the submission limit off (RATE_LIMIT_ENABLED=false).
	RateLimitDisabled bool
	// RateLimitWindow and RateLimitMax: at most Max submissions (POST
	// /api/train and POST /api/tasks/{id}/rerun) per user, else per client
	// IP, in any Window; default 10 s, 3.
	RateLimitWindow time.Duration
	RateLimitMax    int
	// Redis, when set, shares the limit across gateways (REDIS_ADDR); keys
	// start with RedisPrefix (REDIS_PREFIX, default "rlsched"). The Gateway
	// does not close it.
	Redis       rueidis.Client
	RedisPrefix string

	// CanaryUserIDs go to the canary (CANARY_USER_IDS); CanaryPercent of the
	// users (else of the requests, by trace id) too (CANARY_PERCENT, 0..100).
	CanaryUserIDs []string
	CanaryPercent int

	// FallbackDisabled answers 502/504 in the common error shape instead of
	// API.md's fallback 503 (FALLBACK_ENABLED=false).
	FallbackDisabled bool
	// UpstreamTimeout bounds the wait for an upstream's response headers,
	// retries included (FALLBACK_TIMEOUT_MS); default 5 s.
	UpstreamTimeout time.Duration
	// StreamIdleTimeout bounds the silence within a response body streamed
	// from an upstream, and within writes to a client; default 2 min.
	StreamIdleTimeout time.Duration
	// MaxAttempts per request across upstreams; default 3. Only idempotent
	// requests are retried, or any request whose connection was refused.
	MaxAttempts int

	// HealthInterval between active checks of every upstream (GET
	// /api/monitor/health); default 5 s. HealthTimeout bounds one; default
	// 2 s.
	HealthInterval time.Duration
	HealthTimeout  time.Duration
	// EjectAfter consecutive failed requests eject an upstream for EjectFor
	// (default 3 and 10 s; a refused connection ejects at once), doubled with
	// each consecutive ejection up to MaxEjectFor (default 5 min). An
	// upstream ejected because it refused connections returns as soon as an
	// active check passes.
	EjectAfter  int
	EjectFor    time.Duration
	MaxEjectFor time.Duration

	// PublicHosts are names this gateway answers to besides its defaults
	// (localhost, 127.0.0.1 and [::1], and the bound address, with the
	// listen port of each Serve; every interface's address and the host
	// name when bound to all): PUBLIC_HOSTS. "*" turns the check off.
	// Requests under any other Host are refused 421 (internal/crosssite).
	PublicHosts []string

	// Name is this gateway in logs and health answers.
	Name   string
	Logger zerolog.Logger
	// Metrics are the gateway's Prometheus metrics, served at /metrics;
	// default a new obs.GatewayMetrics.
	Metrics *obs.GatewayMetrics
	// Now is the clock of tokens and signatures; default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() error {
	if len(c.JWTSecret) < 16 {
		return errors.New("cannot start the gateway: JWT_SECRET must be set to the masters' secret (at least 16 bytes)")
	}
	if len(c.SharedSecret) < 16 {
		return errors.New("cannot start the gateway: GATEWAY_SHARED_SECRET must be set (at least 16 bytes), the same on the masters")
	}
	c.JWTSecret = append([]byte(nil), c.JWTSecret...)
	c.SharedSecret = append([]byte(nil), c.SharedSecret...)
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defInt := func(d *int, v int) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.RateLimitWindow, 10*time.Second)
	defInt(&c.RateLimitMax, 3)
	def(&c.UpstreamTimeout, 5*time.Second)
	def(&c.StreamIdleTimeout, 2*time.Minute)
	defInt(&c.MaxAttempts, 3)
	def(&c.HealthInterval, 5*time.Second)
	def(&c.HealthTimeout, 2*time.Second)
	defInt(&c.EjectAfter, 3)
	def(&c.EjectFor, 10*time.Second)
	def(&c.MaxEjectFor, 5*time.Minute)
	if c.RedisPrefix == "" {
		c.RedisPrefix = "rlsched"
	}
	if c.CanaryPercent < 0 || c.CanaryPercent > 100 {
		return fmt.Errorf("cannot start the gateway: CANARY_PERCENT must be 0..100, not %d", c.CanaryPercent)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Metrics == nil {
		c.Metrics = obs.NewGatewayMetrics(obs.GatewayMetricsOptions{})
	}
	if c.Name == "" {
		c.Name = "gateway"
	}
	return nil
}
