package httpapi

import (
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/clip"
	"github.com/rlsched/rlsched/internal/signature"
)

// What the gateway vouches for (API.md, Gateway; docs/API.md). The gateway
// strips every X-User-* and X-Gateway-* header a client sent, and signs every
// request it forwards (internal/signature): the Host the client used
// (X-Forwarded-Host), the client's address, and, when it verified a token,
// the identity (X-User-Id, -Name, -Role, -Token-Version), with the method,
// path, query, body hash, trace id, a timestamp and a nonce under the MAC.
//
// This master believes those headers only when GatewayTrustHeaders (or
// GatewayRequire) is on and the signature is valid, fresh and its nonce not
// seen before. An identity is then re-read from the store by id, like a
// token's, and refused when its token version is not the user's. Anything
// else falls back to the token check, so a client that sends X-User-Id
// itself gains nothing. With GatewayRequire, authenticated routes refuse
// every request the gateway did not sign, token or not (public routes stay
// public: health checks and logins use them).

// defaultGatewayMaxSkew is GATEWAY_MAX_SKEW_SECONDS's default.
const defaultGatewayMaxSkew = 300 * time.Second

var errGatewayRequired = &apiError{fasthttp.StatusUnauthorized, codeUnauthorized,
	"this master accepts requests only through the rlsched gateway; send them to the gateway's URL"}

// gatewaySeen is what a request's valid signature vouched for; signed is
// false when it had none (or one this master refused).
type gatewaySeen struct {
	signed                         bool
	host, clientIP                 string
	userID, userName, tokenVersion string
}

// prepareGateway checks the gateway settings of cfg and builds its signer
// and nonce cache.
func prepareGateway(cfg *Config) error {
	cfg.gatewaySigner, cfg.gatewayNonces = nil, nil
	if !cfg.GatewayTrustHeaders && !cfg.GatewayRequire {
		return nil
	}
	if len(cfg.GatewaySharedSecret) < 16 {
		return errors.New("cannot start the REST API: trusting the gateway needs GATEWAY_SHARED_SECRET of at least 16 bytes, the same as the gateway's")
	}
	if cfg.GatewayMaxSkew <= 0 {
		cfg.GatewayMaxSkew = defaultGatewayMaxSkew
	}
	cfg.gatewaySigner = signature.NewSigner(cfg.GatewaySharedSecret)
	cfg.gatewayNonces = signature.NewNonces(cfg.GatewayMaxSkew, 0)
	cfg.GatewaySharedSecret = nil // the signer keeps its own copy
	return nil
}

// checkGateway reads and checks the gateway's signature of a request, once,
// before it is routed.
func (s *Server) checkGateway(ctx *fasthttp.RequestCtx) gatewaySeen {
	signer := s.cfg.gatewaySigner
	if signer == nil {
		return gatewaySeen{}
	}
	h := &ctx.Request.Header
	if len(h.Peek(signature.HeaderSignature)) == 0 {
		return gatewaySeen{}
	}
	tsHeader, nonce := string(h.Peek(signature.HeaderTimestamp)), string(h.Peek(signature.HeaderNonce))
	now := s.cfg.Now()
	why := ""
	switch ts, ok := signature.ParseTimestamp(tsHeader); {
	case !ok || !signature.Fresh(tsHeader, now, s.cfg.GatewayMaxSkew):
		why = "stale or malformed X-Gateway-Timestamp"
	case nonce == "" || len(nonce) > 64:
		why = "missing or malformed X-Gateway-Nonce"
	case !signer.ValidRequest(&ctx.Request):
		why = "bad X-Gateway-Signature"
	default:
		// Only a valid signature reaches the cache: nobody else can fill it.
		if err := s.cfg.gatewayNonces.Check(nonce, ts, now); err != nil {
			why = err.Error()
		}
	}
	if why != "" {
		s.log.Warn().Str("traceId", clip.String(string(h.Peek("X-Trace-Id")), 64)).Str("remote", ctx.RemoteIP().String()).
			Str("reason", why).Msg("gateway identity refused")
		return gatewaySeen{}
	}
	return gatewaySeen{signed: true, host: string(h.Peek(signature.HeaderForwardedHost)),
		clientIP: string(h.Peek(signature.HeaderClientIP)), userID: string(h.Peek(signature.HeaderUserID)),
		userName: string(h.Peek(signature.HeaderUserName)), tokenVersion: string(h.Peek(signature.HeaderTokenVersion))}
}

// gatewayUser is authenticate's first step: the user of a request whose
// signed identity the gateway vouched for. done reports that it decided (u,
// or e); otherwise the caller goes on with its token check.
func (s *Server) gatewayUser(r *request) (u core.User, e *apiError, done bool) {
	if s.cfg.gatewaySigner == nil {
		return core.User{}, nil, false
	}
	gw := r.gw
	if !gw.signed {
		if s.cfg.GatewayRequire {
			return core.User{}, errGatewayRequired, true
		}
		return core.User{}, nil, false
	}
	if gw.userID == "" { // anonymous: the gateway let it through (JWT_ENFORCE=false)
		return core.User{}, nil, false
	}
	id, err := strconv.ParseInt(gw.userID, 10, 64)
	if err != nil || id <= 0 {
		return core.User{}, errUnauthorized, true
	}
	version, err := strconv.ParseInt(gw.tokenVersion, 10, 64)
	if err != nil {
		return core.User{}, errUnauthorized, true
	}
	u, e = s.currentUser(id, version)
	if e != nil {
		return core.User{}, e, true
	}
	if u.Username != gw.userName {
		return core.User{}, errUnauthorized, true
	}
	return u, nil, true
}

// clientIP is the address of the caller: the gateway's word for it on a
// request it signed, else the peer's.
func (r *request) clientIP() string {
	if r.gw.signed && r.gw.clientIP != "" {
		return r.gw.clientIP
	}
	return r.ctx.RemoteIP().String()
}

// site is the host[:port] the caller's browser addressed: the Host the
// gateway signed for a request it forwarded, else this request's Host.
func (r *request) site() string {
	if r.gw.signed && r.gw.host != "" {
		return r.gw.host
	}
	return string(r.ctx.Host())
}
