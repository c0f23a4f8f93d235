// Package httpapi is the master's REST API (API.md: auth, runs, logs, workers,
// health) on fasthttp.
//
// It never trusts a client for identity (the owner of a run is the verified
// token's user, never a body field), validates every id before it touches the
// filesystem, and never answers 500 to any input: store failures are 503, and a
// panic is recovered into a logged 500 only as a last resort.
package httpapi

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"golang.org/x/crypto/bcrypt"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/codetree"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/apierr"
	"github.com/rlsched/rlsched/internal/auth"
	"github.com/rlsched/rlsched/internal/crosssite"
	"github.com/rlsched/rlsched/internal/linger"
	"github.com/rlsched/rlsched/internal/obs"
	"github.com/rlsched/rlsched/internal/signature"
	"github.com/rlsched/rlsched/live"
	"github.com/rlsched/rlsched/notify"
	"github.com/rlsched/rlsched/store"
)

// MaxBodySize is the largest request body accepted; larger ones get 413.
const MaxBodySize = apierr.MaxBody

// readBodyLimit is where fasthttp itself stops reading a body: the
// ErrorHandler answers 413 and the connection closes, lingering
// (internal/linger) so that a client still sending reads the answer rather
// than a reset. Between MaxBodySize and it, the body is read whole and
// refused by the handler, and the connection stays open.
const readBodyLimit = 2 * MaxBodySize

// Config of a Server. Zero values get the documented defaults.
type Config struct {
	// JWTSecret signs and verifies tokens (HS256); at least 16 bytes.
	JWTSecret []byte
	// TokenTTL is the lifetime of a login token; default 24h.
	TokenTTL time.Duration
	// LogDir holds the run logs, one <taskId>.log per run.
	LogDir string
	// DefaultTrainer is the argv prefix of an "algorithm" submission, e.g.
	// ["python3","-u","@scripts/train.py"]; "--algo A --episodes N [--lr X]"
	// follow it.
	DefaultTrainer []string
	// MasterID names this master in health answers; default ctl.MasterID().
	MasterID string
	// LeasesKind is reported by the health endpoint ("memory" or "redis").
	LeasesKind string
	// BcryptCost for new password hashes; default bcrypt.DefaultCost.
	BcryptCost int
	// CookieSecure marks the jwt_token cookie Secure (set it behind HTTPS).
	CookieSecure bool
	// Registration is who may register (REGISTRATION): RegistrationOpen
	// (the default), RegistrationClosed or RegistrationAdmin.
	Registration string
	// OutputsVisibility (ARTIFACT_VISIBILITY) is who reads runs' outputs:
	// core.OutputsAll (the default) or core.OutputsOwner.
	OutputsVisibility string
	// MaxQueuedPerUser (MAX_QUEUED_PER_USER) caps a user's QUEUED runs; a
	// submission that would pass it is refused 409. 0: no cap.
	MaxQueuedPerUser int
	// SubmitLimitMax and SubmitLimitWindow (RATE_LIMIT_MAX_REQUESTS,
	// RATE_LIMIT_WINDOW_SECONDS): at most Max submissions of a user per
	// Window that the gateway did not sign (submitlimit.go). 0: no limit.
	SubmitLimitMax    int
	SubmitLimitWindow time.Duration
	// MaxInteractiveGPUs (MAX_INTERACTIVE_GPUS) caps the GPUs of a user's
	// interactive sessions not yet ended (interactive.go). 0: no cap.
	MaxInteractiveGPUs int
	// MaxUserOutputBytes (ARTIFACT_MAX_MB_PER_USER) is what GET
	// /api/auth/me says a user's runs may keep; 0: no bound.
	MaxUserOutputBytes int64
	Logger             zerolog.Logger
	// Now is the clock for token issue and expiry; default time.Now.
	Now func() time.Time
	// Hub serves GET /ws (API.md's WebSocket); nil answers 503 there.
	Hub *live.Hub
	// Terminals serves the terminals of interactive runs (terminal.go);
	// nil answers 503 there.
	Terminals Terminals
	// Apps reaches the web apps of interactive runs (sessionapp.go); nil
	// answers 503 there.
	Apps SessionApps
	// Blobs holds the runs' output files (GET /api/tasks/{id}/artifacts/…);
	// nil: none can be downloaded.
	Blobs artifact.Store
	// OutputStats, when set, is the outputs receiver's health, shown under
	// "artifacts" in /api/monitor/health.
	OutputStats func() map[string]any
	// WSPingInterval is how often /ws pings its clients; default 25s.
	WSPingInterval time.Duration
	// NotifyTargets are where users' webhooks may go (NOTIFY_ALLOW_HOSTS);
	// default any public host.
	NotifyTargets *notify.Targets
	// Metrics are the master's Prometheus metrics, served at /metrics; the
	// API counts its requests there by route. Default: a new obs.MasterMetrics.
	Metrics *obs.MasterMetrics
	// FairShareHalfLife (FAIRSHARE_HALF_LIFE) decays the usage GET
	// /api/users/usage shows, as the scheduler's; default 168 h.
	// DefaultGPUQuota (DEFAULT_USER_GPU_QUOTA) is the GPU quota shown for
	// users without one of their own; 0: none.
	FairShareHalfLife time.Duration
	DefaultGPUQuota   int
	// Resources are the cores and memory a run that asks for none gets
	// (DEFAULT_CPUS_PER_GPU, ...); nil: core.DefaultResources.
	Resources *core.ResourceDefaults
	// Deps decides the runs the API creates waiting on others (the
	// master's dependency controller); nil: they wait for its next pass.
	Deps DepDecider
	// CodeLimits are CODE_MAX_MB and CODE_MAX_FILES, a code snapshot's
	// (codetree); zero: codetree.DefaultLimits.
	CodeLimits codetree.Limits

	// PublicHosts are names this master answers to besides its defaults
	// (localhost, 127.0.0.1 and [::1], and the bound address, with the
	// listen port of each Serve; every interface's address and the host
	// name when bound to all): PUBLIC_HOSTS. "*" turns the check off.
	// Requests under any other Host are refused 421 (internal/crosssite).
	PublicHosts []string

	// Gateway identity (gatewayauth.go). GatewayTrustHeaders believes the
	// X-User-* headers of a request the gateway signed with
	// GatewaySharedSecret, at most GatewayMaxSkew old (default 300s);
	// GatewayRequire also refuses authenticated requests it did not sign.
	GatewayTrustHeaders bool
	GatewayRequire      bool
	GatewaySharedSecret []byte
	GatewayMaxSkew      time.Duration
	gatewaySigner       *signature.Signer // set by New
	gatewayNonces       *signature.Nonces // set by New
}

// Server serves the REST API. Handler, Serve and Shutdown are safe to call
// from any goroutine.
type Server struct {
	cfg  Config
	st   store.Store
	ctl  Control
	log  zerolog.Logger
	srv  *fasthttp.Server
	apps appClients // the clients of sessions' web apps (sessionapp.go)
	// tokens issues and verifies login tokens under cfg.JWTSecret.
	tokens *auth.Tokens
	// hosts are the names this master answers to.
	hosts crosssite.Hosts
	// throttle counts failed sign-ins (throttle.go).
	throttle *throttle
	// routes is the REST API's table (handler.go); uiPage and uiStatic the
	// dashboard's; badRun refuses a malformed run id under /api/tasks/;
	// unrouted counts the requests no route took.
	routes                      []*route
	uiPage, uiStatic, uiMissing *route
	badRun                      *route
	unrouted                    *obs.Route
	// curves keeps the curves answers of ended sweeps (sweeps.go).
	curves *answerCache
	// queued are users' queued counts for MAX_QUEUED_PER_USER (roomInQueue).
	queued queueCounts
	// submits is the submission limit (submitlimit.go); nil: none.
	submits *submitLimit

	mu      sync.Mutex
	stopped bool
	lns     []net.Listener
	// dummyHash is compared against when a login names an unknown user, so
	// both paths cost one bcrypt comparison.
	dummyHash []byte
}

// New checks cfg and returns a Server over st and ctl.
func New(cfg Config, st store.Store, ctl Control) (*Server, error) {
	if len(cfg.JWTSecret) < 16 {
		return nil, errors.New("cannot start the REST API: JWT secret must be at least 16 bytes; set JWT_SECRET")
	}
	if err := prepareGateway(&cfg); err != nil {
		return nil, err
	}
	if st == nil || ctl == nil {
		return nil, errors.New("BUG: httpapi.New needs a store and a control")
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = 24 * time.Hour
	}
	if cfg.FairShareHalfLife <= 0 {
		cfg.FairShareHalfLife = 168 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BcryptCost == 0 {
		cfg.BcryptCost = bcrypt.DefaultCost
	}
	if cfg.BcryptCost < bcrypt.MinCost || cfg.BcryptCost > bcrypt.MaxCost {
		return nil, fmt.Errorf("cannot start the REST API: bcrypt cost %d outside %d..%d", cfg.BcryptCost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	if cfg.LogDir == "" {
		cfg.LogDir = "logs"
	}
	switch cfg.Registration {
	case "":
		cfg.Registration = RegistrationOpen
	case RegistrationOpen, RegistrationClosed, RegistrationAdmin:
	default:
		return nil, fmt.Errorf("cannot start the REST API: REGISTRATION must be %s, %s or %s, not %q",
			RegistrationOpen, RegistrationClosed, RegistrationAdmin, cfg.Registration)
	}
	switch cfg.OutputsVisibility {
	case "":
		cfg.OutputsVisibility = core.OutputsAll
	case core.OutputsAll, core.OutputsOwner:
	default:
		return nil, fmt.Errorf("cannot start the REST API: ARTIFACT_VISIBILITY must be %s or %s, not %q",
			core.OutputsAll, core.OutputsOwner, cfg.OutputsVisibility)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = obs.NewMasterMetrics(obs.MasterMetricsOptions{})
	}
	if cfg.NotifyTargets == nil {
		cfg.NotifyTargets = &notify.Targets{}
	}
	cfg.JWTSecret = append([]byte(nil), cfg.JWTSecret...)
	cfg.DefaultTrainer = append([]string(nil), cfg.DefaultTrainer...)
	if cfg.CodeLimits == (codetree.Limits{}) {
		cfg.CodeLimits = codetree.DefaultLimits
	}
	if cfg.Resources == nil {
		d := core.DefaultResources
		cfg.Resources = &d
	}
	if err := cfg.Resources.Check(); err != nil {
		return nil, fmt.Errorf("cannot start the REST API: %w", err)
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte("rlsched-dummy-password"), cfg.BcryptCost)
	if err != nil {
		return nil, fmt.Errorf("cannot prepare password hashing: %w", err)
	}
	s := &Server{cfg: cfg, st: st, ctl: ctl, log: cfg.Logger, dummyHash: dummy,
		tokens: auth.NewTokens(cfg.JWTSecret, cfg.Now), throttle: newThrottle(), curves: newAnswerCache(curvesCacheBytes),
		queued: queueCounts{m: map[int64]queueCount{}}, submits: newSubmitLimit(cfg.SubmitLimitMax, cfg.SubmitLimitWindow, cfg.Now)}
	if err := s.hosts.Add(cfg.PublicHosts...); err != nil {
		return nil, fmt.Errorf("cannot start the REST API: PUBLIC_HOSTS: %w", err)
	}
	s.routes = s.apiRoutes()
	for _, rt := range s.routes {
		rt.met = cfg.Metrics.Route(rt.pattern)
	}
	s.uiPage, s.uiStatic, s.uiMissing = s.uiRoutes(cfg.Metrics)
	s.unrouted = cfg.Metrics.Route("unmatched")
	s.badRun = &route{pattern: "/api/tasks/{id}/{rest...}", met: s.unrouted}
	s.srv = &fasthttp.Server{
		Handler:            s.Handler(),
		ErrorHandler:       s.handleTransportError,
		Name:               "rlsched",
		MaxRequestBodySize: readBodyLimit,
		// Room for the headers of a browser on localhost, whose cookies
		// for other ports come along.
		ReadBufferSize: 16 << 10,
		ReadTimeout:    30 * time.Second,
		WriteTimeout:   60 * time.Second,
		IdleTimeout:    2 * time.Minute,
		Logger:         fasthttpLogger{s.log},
		// No body of this API is a form; never spool one to temporary files.
		DisablePreParseMultipartForm: true,
	}
	return s, nil
}

// Serve answers requests on ln until Shutdown; it returns nil after Shutdown,
// also when Shutdown came first.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	if err := s.hosts.Add(crosssite.DefaultNames(ln.Addr())...); err != nil {
		return fmt.Errorf("BUG: default host names: %w", err)
	}
	s.log.Info().Strs("hosts", s.hosts.Names()).Msg("answering to these host names (PUBLIC_HOSTS adds more)")
	err := s.srv.Serve(&linger.Listener{Listener: ln})
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits for open requests to end.
func (s *Server) Shutdown() error {
	s.mu.Lock()
	s.stopped = true
	lns := s.lns
	s.lns = nil
	s.mu.Unlock()
	err := s.srv.Shutdown()
	// fasthttp closes only the listeners its Serve already registered; a
	// Serve that had not got that far is stopped here.
	for _, ln := range lns {
		_ = ln.Close()
	}
	return err
}

type fasthttpLogger struct{ log zerolog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Warn().Str("component", "fasthttp").Msg(fmt.Sprintf(format, args...))
}
