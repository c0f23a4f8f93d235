package httpapi

import (
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/signature"
)

// Identity from the gateway (API.md, Gateway; DESIGN.md, Security). The
// gateway verifies the caller's token, strips every X-User-* and X-Gateway-*
// header a client sent, and signs the identity it verified:
//
//	X-User-Id, X-User-Name, X-User-Role, X-Gateway-Timestamp,
//	X-Gateway-Signature = hex HMAC-SHA256(GATEWAY_SHARED_SECRET) over
//	method, path, trace id, timestamp and the three identity headers.
//
// This master believes those headers only when GatewayTrustHeaders (or
// GatewayRequire) is on and the signature is valid and fresh; the user is
// then re-read from the store by id, like a token's. Anything else falls back
// to the token check, so a client that sends X-User-Id itself gains nothing.
// With GatewayRequire, authenticated routes refuse every request the gateway
// did not sign, token or not (public routes stay public: the gateway's health
// checks and logins use them).

// defaultGatewayMaxSkew is GATEWAY_MAX_SKEW_SECONDS's default.
const defaultGatewayMaxSkew = 300 * time.Second

var errGatewayRequired = &apiError{fasthttp.StatusUnauthorized, codeUnauthorized,
	"this master accepts requests only through the rlsched gateway; send them to the gateway's URL"}

// prepareGateway checks the gateway settings of cfg and builds its signer.
func prepareGateway(cfg *Config) error {
	cfg.gatewaySigner = nil
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
	cfg.GatewaySharedSecret = nil // the signer keeps its own copy
	return nil
}

// gatewayUser is authenticate's first step: the user of a request the gateway
// signed. done reports that it decided (u, or e); otherwise the caller goes
// on with its token check.
func (s *Server) gatewayUser(ctx *fasthttp.RequestCtx) (u core.User, e *apiError, done bool) {
	signer := s.cfg.gatewaySigner
	if signer == nil {
		return core.User{}, nil, false
	}
	h := &ctx.Request.Header
	sig := string(h.Peek(signature.HeaderSignature))
	f := signature.Fields{
		Method:    string(ctx.Method()),
		Path:      string(ctx.Request.URI().PathOriginal()),
		TraceID:   string(h.Peek("X-Trace-Id")),
		Timestamp: string(h.Peek(signature.HeaderTimestamp)),
		UserID:    string(h.Peek(signature.HeaderUserID)),
		UserName:  string(h.Peek(signature.HeaderUserName)),
		UserRole:  string(h.Peek(signature.HeaderUserRole)),
	}
	why := ""
	switch {
	case sig == "":
		why = "unsigned"
	case !signature.Fresh(f.Timestamp, s.cfg.Now(), s.cfg.GatewayMaxSkew):
		why = "stale or malformed X-Gateway-Timestamp"
	case !signer.Valid(&f, sig):
		why = "bad X-Gateway-Signature"
	}
	if why != "" {
		if sig != "" {
			s.log.Warn().Str("traceId", truncate(f.TraceID, 64)).Str("remote", ctx.RemoteIP().String()).
				Str("reason", why).Msg("gateway identity refused")
		}
		if s.cfg.GatewayRequire {
			return core.User{}, errGatewayRequired, true
		}
		return core.User{}, nil, false
	}
	id, err := strconv.ParseInt(f.UserID, 10, 64)
	if err != nil || id <= 0 {
		return core.User{}, errUnauthorized, true
	}
	sctx, cancel := storeCtx()
	defer cancel()
	u, err = s.st.UserByID(sctx, id)
	if err != nil {
		if errors.Is(err, core.ErrNotFound) {
			return core.User{}, errUnauthorized, true
		}
		return core.User{}, storeError(err, "user"), true
	}
	if u.Username != f.UserName {
		return core.User{}, errUnauthorized, true
	}
	return u, nil, true
}
