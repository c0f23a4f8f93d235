package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/apierr"
	"github.com/rlsched/rlsched/internal/clip"
	"github.com/rlsched/rlsched/internal/linger"
)

// apiError is an answer other than success: status, code and a sentence for
// a person. It is internal/apierr's Error, as a type of this package so that
// handlers can write its literals unkeyed.
type apiError apierr.Error

func (e *apiError) Error() string { return (*apierr.Error)(e).Error() }

// Error codes of API.md (internal/apierr).
const (
	codeBadRequest          = apierr.BadRequest
	codeUnauthorized        = apierr.Unauthorized
	codeForbidden           = apierr.Forbidden
	codeNotFound            = apierr.NotFound
	codeMethodNotAllowed    = apierr.MethodNotAllowed
	codeConflict            = apierr.Conflict
	codeUnavailable         = apierr.Unavailable
	codeRangeNotSatisfiable = apierr.RangeNotSatisfiable
	codeInternal            = apierr.Internal
)

func errBadRequest(format string, args ...any) *apiError {
	return (*apiError)(apierr.New(fasthttp.StatusBadRequest, codeBadRequest, format, args...))
}

func errNotFound(what string) *apiError {
	return &apiError{fasthttp.StatusNotFound, codeNotFound, what + " not found"}
}

var (
	errUnauthorized = &apiError{fasthttp.StatusUnauthorized, codeUnauthorized,
		"sign in first: send a valid token as 'Authorization: Bearer <jwt>' or the jwt_token cookie"}
	errTooLarge       = (*apiError)(apierr.ErrTooLarge)
	errBadCredentials = &apiError{fasthttp.StatusUnauthorized, codeUnauthorized,
		"wrong username or password, or the account is disabled (an admin can enable it)"}
	errRevoked = &apiError{fasthttp.StatusUnauthorized, codeUnauthorized,
		"this sign-in has ended (a logout, a change of your role or password): sign in again"}
	errDisabled = &apiError{fasthttp.StatusForbidden, codeForbidden,
		"this account is disabled: ask an admin to enable it"}
)

func errMisdirected(host []byte) *apiError {
	return &apiError{fasthttp.StatusMisdirectedRequest, apierr.MisdirectedRequest,
		fmt.Sprintf("this server does not answer to the name %q; open it by one of its own names, or add this one to PUBLIC_HOSTS", clip.String(string(host), 128))}
}

// writeError answers with e in API.md's error shape.
func writeError(ctx *fasthttp.RequestCtx, traceID string, e *apiError) {
	apierr.Write(ctx, traceID, (*apierr.Error)(e))
}

// storeError maps an error of the store or the dispatcher to an answer: typed
// errors to their codes, anything else to 503 (a broken store is not a bug of
// the request, and no input may produce a 500).
func storeError(err error, what string) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, core.ErrNotFound):
		return errNotFound(what)
	case errors.Is(err, core.ErrConflict), errors.Is(err, core.ErrFenced):
		return &apiError{fasthttp.StatusConflict, codeConflict, what + " changed or already exists; reload and try again"}
	case errors.Is(err, core.ErrUnavailable):
		return &apiError{fasthttp.StatusServiceUnavailable, codeUnavailable,
			"the store cannot be reached; try again later"}
	}
	return &apiError{fasthttp.StatusServiceUnavailable, codeUnavailable, "the store is unavailable; try again later"}
}

// decodeJSON unmarshals body into v, turning decode errors into 400 answers
// that name the offending field.
func decodeJSON(body []byte, v any) *apiError {
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		if te.Field == "" {
			return errBadRequest("the body must be a JSON object, not %s", te.Value)
		}
		return errBadRequest("field %q must be %s, not %s", te.Field, jsonKind(te.Type), te.Value)
	case errors.As(err, &se):
		return errBadRequest("malformed JSON at byte %d: %v", se.Offset, se)
	}
	return errBadRequest("malformed JSON: %v", err)
}

// jsonKind names a Go type the way a JSON author thinks of it.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a JSON value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Name() == "RawMessage" {
			return "a JSON value"
		}
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "of another type"
}

// handleTransportError answers requests fasthttp could not read (too large,
// malformed, timed out) in the API's error shape.
func (s *Server) handleTransportError(ctx *fasthttp.RequestCtx, err error) {
	trace := string(ctx.Request.Header.Peek("X-Trace-Id"))
	if !core.ValidTraceID(trace) {
		trace = core.NewTraceID()
	}
	e := (*apiError)(apierr.Transport(err))
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		linger.Arm(ctx.Conn()) // the client may still be sending
	}
	ctx.Response.Header.Set("X-Trace-Id", trace)
	writeError(ctx, trace, e)
	s.log.Info().
		Str("method", clip.String(string(ctx.Method()), 16)).
		Str("path", clip.String(string(ctx.Request.URI().PathOriginal()), 512)).
		Int("status", e.Status).
		Str("traceId", trace).
		AnErr("reason", err).
		Msg("request refused")
}
