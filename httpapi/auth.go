package httpapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
	"golang.org/x/crypto/bcrypt"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/apierr"
	"github.com/rlsched/rlsched/internal/auth"
	"github.com/rlsched/rlsched/internal/clip"
	"github.com/rlsched/rlsched/store"
)

// CookieName carries the login token for browsers and WebSockets.
const CookieName = auth.CookieName

const (
	minPasswordChars = 8
	maxPasswordBytes = 72 // bcrypt's limit
	storeTimeout     = 10 * time.Second
)

type credentials struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

type userJSON struct {
	ID       int64     `json:"id"`
	Username string    `json:"username"`
	Role     core.Role `json:"role"`
	// Disabled shows only when true: a registration that waits for an
	// admin (REGISTRATION=admin).
	Disabled bool `json:"disabled,omitempty"`
}

func userView(u core.User) userJSON { return userJSON{u.ID, u.Username, u.Role, u.Disabled} }

// meJSON is GET /api/auth/me: the user, and what their runs' outputs keep
// of ARTIFACT_MAX_MB_PER_USER (0: no bound).
type meJSON struct {
	userJSON
	ArtifactBytes      int64 `json:"artifactBytes"`
	ArtifactLimitBytes int64 `json:"artifactLimitBytes"`
}

func storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), storeTimeout)
}

// Registration modes (REGISTRATION): anyone may register; no one may (admins
// add users); or anyone may, and an admin enables the account.
const (
	RegistrationOpen   = "open"
	RegistrationClosed = "closed"
	RegistrationAdmin  = "admin"
)

func (s *Server) register(r *request) *apiError {
	var c credentials
	if e := decodeJSON(r.ctx.PostBody(), &c); e != nil {
		return e
	}
	if s.cfg.Registration == RegistrationClosed {
		return &apiError{fasthttp.StatusForbidden, codeForbidden,
			"registration is closed on this server: ask an admin to add you (rlsched user add)"}
	}
	u, e := s.createUser(c, core.RoleUser, s.cfg.Registration == RegistrationAdmin)
	if e != nil {
		return e
	}
	return s.writeJSON(r, fasthttp.StatusCreated, userView(u))
}

// createUser checks c and stores a new user of role, disabled or not.
func (s *Server) createUser(c credentials, role core.Role, disabled bool) (core.User, *apiError) {
	if err := core.CheckNewUsername(c.Username); err != nil {
		return core.User{}, errBadRequest("%s", err.Error())
	}
	hash, e := s.hashPassword(c.Password)
	if e != nil {
		return core.User{}, e
	}
	u := core.User{Username: c.Username, Role: role, PasswordHash: hash}
	ctx, cancel := storeCtx()
	defer cancel()
	if err := s.st.CreateUser(ctx, &u); err != nil {
		if errors.Is(err, core.ErrConflict) {
			return core.User{}, &apiError{fasthttp.StatusConflict, codeConflict, "username " + c.Username + " is taken; choose another"}
		}
		return core.User{}, storeError(err, "user")
	}
	// The first user is an admin and is never left waiting for one.
	if disabled && u.Role != core.RoleAdmin {
		yes := true
		var err error
		if u, err = s.st.UpdateUser(ctx, u.ID, store.UserPatch{Disabled: &yes}); err != nil {
			return core.User{}, storeError(err, "user")
		}
	}
	return u, nil
}

// hashPassword checks a new password (8 characters to 72 bytes) and
// hashes it.
func (s *Server) hashPassword(pw string) (string, *apiError) {
	if !utf8.ValidString(pw) || utf8.RuneCountInString(pw) < minPasswordChars || len(pw) > maxPasswordBytes {
		return "", errBadRequest("password must be at least %d characters and at most %d bytes (bcrypt reads no further; a non-ASCII character takes 2 to 4 bytes)",
			minPasswordChars, maxPasswordBytes)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(pw), s.cfg.BcryptCost)
	if err != nil {
		return "", errBadRequest("cannot hash this password: %v", err)
	}
	return string(hash), nil
}

func (s *Server) login(r *request) *apiError {
	var c credentials
	if e := decodeJSON(r.ctx.PostBody(), &c); e != nil {
		return e
	}
	if len(c.Password) > maxPasswordBytes { // as at register: bcrypt reads no further
		return errBadRequest("password must be at most %d bytes", maxPasswordBytes)
	}
	ctx, cancel := storeCtx()
	defer cancel()
	var u core.User
	var err error = core.ErrNotFound
	if core.ValidUsername(c.Username) {
		u, err = s.st.UserByName(ctx, c.Username)
	}
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return storeError(err, "user")
	}
	known := "" // the user to count failures against: only one that exists
	if err == nil {
		known = u.Username
	}
	addr := r.clientIP()
	if e := s.throttled(r, known, addr, clip.String(c.Username, 64), "too many failed sign-ins"); e != nil {
		return e
	}
	if err != nil {
		// Same cost as a real comparison, so timing does not tell which
		// usernames exist.
		_ = bcrypt.CompareHashAndPassword(s.dummyHash, []byte(c.Password))
		s.throttle.failed("", addr, s.cfg.Now())
		return errBadCredentials
	}
	// A disabled account answers as a wrong password does, right password
	// or not: an answer that differed would let anyone test guesses against
	// it (and the password may be in use elsewhere).
	if bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(c.Password)) != nil || u.Disabled {
		s.throttle.failed(known, addr, s.cfg.Now())
		return errBadCredentials
	}
	s.throttle.succeeded(known, addr, s.cfg.Now())
	now := s.cfg.Now()
	if err := s.st.RecordLogin(ctx, u.ID, now); err != nil { // not worth refusing the sign-in
		s.log.Warn().Err(err).Str("traceId", r.trace).Int64("userId", u.ID).Msg("cannot record the sign-in time")
	}
	tok, exp, e := s.signIn(r, u, now)
	if e != nil {
		return e
	}
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		Token     string   `json:"token"`
		ExpiresAt string   `json:"expiresAt"`
		User      userJSON `json:"user"`
	}{tok, exp.UTC().Format(time.RFC3339), userView(u)})
}

// signIn issues u a token of the token TTL from now and sets it as the
// session cookie: the one way a sign-in starts (login, and a password
// change, which revokes the tokens before it).
func (s *Server) signIn(r *request, u core.User, now time.Time) (string, time.Time, *apiError) {
	tok, exp, e := s.issueToken(r, u, now)
	if e != nil {
		return "", time.Time{}, e
	}
	c := fasthttp.AcquireCookie()
	defer fasthttp.ReleaseCookie(c)
	c.SetKey(CookieName)
	c.SetValue(tok)
	c.SetPath("/")
	c.SetHTTPOnly(true)
	c.SetSameSite(fasthttp.CookieSameSiteStrictMode)
	c.SetSecure(s.cfg.CookieSecure)
	c.SetMaxAge(int(s.cfg.TokenTTL / time.Second))
	r.ctx.Response.Header.SetCookie(c)
	return tok, exp, nil
}

// issueToken signs u a token of the token TTL from now.
func (s *Server) issueToken(r *request, u core.User, now time.Time) (string, time.Time, *apiError) {
	exp := now.Add(s.cfg.TokenTTL)
	tok, err := s.tokens.Issue(auth.Identity{UserID: u.ID, Name: u.Username, Role: string(u.Role), Version: u.TokenVersion}, now, exp)
	if err != nil {
		s.log.Error().Err(err).Str("traceId", r.trace).Msg("cannot sign a token")
		return "", time.Time{}, &apiError{fasthttp.StatusServiceUnavailable, codeUnavailable, "cannot sign a token; try again"}
	}
	return tok, exp, nil
}

// throttled is the 429 of password guessing (the sign-in throttle) for
// user (counted only when known, "" otherwise) from addr, or nil; who
// names the attempt in the log, what the answer.
func (s *Server) throttled(r *request, user, addr, who, what string) *apiError {
	d := s.throttle.wait(user, addr, s.cfg.Now())
	if d <= 0 {
		return nil
	}
	secs := int((d + time.Second - 1) / time.Second)
	r.ctx.Response.Header.Set("Retry-After", strconv.Itoa(secs))
	s.log.Warn().Str("traceId", r.trace).Str("user", who).Str("addr", addr).Msg("sign-in throttled")
	return &apiError{fasthttp.StatusTooManyRequests, apierr.RateLimited,
		fmt.Sprintf("%s for this user or from this address; try again in %d s", what, secs)}
}

// changePassword is PUT /api/auth/me/password {"current", "new"}: the
// caller's own password, the current one checked (and throttled as a
// sign-in is, so it is no way around the login's limit). Every token of the
// user is revoked, other browsers' and scripts' too; this browser gets a
// new one, so it stays signed in.
func (s *Server) changePassword(r *request) *apiError {
	var b struct {
		Current string `json:"current"`
		New     string `json:"new"`
	}
	if e := decodeJSON(r.ctx.PostBody(), &b); e != nil {
		return e
	}
	if len(b.Current) > maxPasswordBytes {
		return errBadRequest("current: a password is at most %d bytes", maxPasswordBytes)
	}
	hash, e := s.hashPassword(b.New)
	if e != nil {
		return &apiError{e.Status, e.Code, "new: " + e.Message}
	}
	ctx, cancel := storeCtx()
	defer cancel()
	u, err := s.st.UserByID(ctx, r.user.ID)
	if err != nil {
		return storeError(err, "user")
	}
	addr := r.clientIP()
	if e := s.throttled(r, u.Username, addr, u.Username, "too many wrong passwords"); e != nil {
		return e
	}
	if bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(b.Current)) != nil {
		s.throttle.failed(u.Username, addr, s.cfg.Now())
		return &apiError{fasthttp.StatusForbidden, codeForbidden, "current: that is not your current password"}
	}
	s.throttle.succeeded(u.Username, addr, s.cfg.Now())
	u, err = s.st.UpdateUser(ctx, u.ID, store.UserPatch{PasswordHash: &hash}) // raises the token version
	if err != nil {
		return storeError(err, "user")
	}
	s.log.Info().Str("traceId", r.trace).Int64("userId", u.ID).Msg("password changed by its user; their other sign-ins revoked")
	if _, _, e := s.signIn(r, u, s.cfg.Now()); e != nil {
		return e
	}
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		User userJSON `json:"user"`
	}{userView(u)})
}

// newToken is POST /api/auth/me/token: a token for scripts (the CLI's
// RLSCHED_TOKEN, the Python client, curl), of the same identity and TTL
// as a sign-in's; the browser's cookie cannot be read by its scripts.
func (s *Server) newToken(r *request) *apiError {
	ctx, cancel := storeCtx()
	defer cancel()
	u, err := s.st.UserByID(ctx, r.user.ID)
	if err != nil {
		return storeError(err, "user")
	}
	tok, exp, e := s.issueToken(r, u, s.cfg.Now())
	if e != nil {
		return e
	}
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		Token     string `json:"token"`
		ExpiresAt string `json:"expiresAt"`
	}{tok, exp.UTC().Format(time.RFC3339)})
}

// logout ends the caller's sign-in: it revokes every token of the user
// (the token version goes up; store.Store.BumpTokenVersion) and clears the
// cookie. Without a valid token there is nothing to revoke, and the cookie
// is cleared all the same.
func (s *Server) logout(r *request) *apiError {
	if u, e := s.authenticate(r, false); e == nil {
		ctx, cancel := storeCtx()
		_, err := s.st.BumpTokenVersion(ctx, u.ID)
		cancel()
		if err != nil {
			return storeError(err, "user")
		}
		s.log.Info().Str("traceId", r.trace).Int64("userId", u.ID).Msg("signed out: the user's tokens are revoked")
	}
	c := fasthttp.AcquireCookie()
	defer fasthttp.ReleaseCookie(c)
	c.SetKey(CookieName)
	c.SetValue("")
	c.SetPath("/")
	c.SetHTTPOnly(true)
	c.SetSameSite(fasthttp.CookieSameSiteStrictMode)
	c.SetSecure(s.cfg.CookieSecure)
	c.SetExpire(fasthttp.CookieExpireDelete)
	r.ctx.Response.Header.SetCookie(c)
	r.ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}

func (s *Server) me(r *request) *apiError {
	ctx, cancel := storeCtx()
	n, err := s.st.ArtifactBytes(ctx, r.user.ID)
	cancel()
	if err != nil {
		return storeError(err, "user")
	}
	return s.writeJSON(r, fasthttp.StatusOK, meJSON{userView(r.user), n, max(s.cfg.MaxUserOutputBytes, 0)})
}

// authenticate verifies the caller's token (Authorization: Bearer, else
// ?token= when query is true, else the jwt_token cookie), or the gateway's
// signed identity (gatewayauth.go), and returns the user as the store has it
// now.
func (s *Server) authenticate(r *request, query bool) (core.User, *apiError) {
	if u, e, done := s.gatewayUser(r); done { // identity signed by the gateway
		return u, e
	}
	tok, src := auth.FromRequest(&r.ctx.Request, query)
	if r.app {
		tok, src = auth.FromAppRequest(&r.ctx.Request)
	}
	if src == auth.None {
		return core.User{}, errUnauthorized
	}
	who, ok := s.tokens.Verify(tok)
	if !ok {
		return core.User{}, errUnauthorized
	}
	return s.currentUser(who.UserID, who.Version)
}

// currentUser reads the user of a token (or of the gateway's signed
// identity) as the store has it now, refusing a token whose version is not
// the user's: it was revoked (a logout, a change of role). The store is read
// on every request, on every master, so a revocation holds from the next
// request on, wherever it lands.
func (s *Server) currentUser(id, version int64) (core.User, *apiError) {
	sctx, cancel := storeCtx()
	defer cancel()
	u, err := s.st.UserByID(sctx, id)
	if err != nil {
		if errors.Is(err, core.ErrNotFound) {
			return core.User{}, errUnauthorized
		}
		return core.User{}, storeError(err, "user")
	}
	// Disabling and deleting also moved the version; these say why.
	if u.Deleted {
		return core.User{}, errUnauthorized
	}
	if u.Disabled {
		return core.User{}, errDisabled
	}
	if u.TokenVersion != version {
		return core.User{}, errRevoked
	}
	return u, nil
}
