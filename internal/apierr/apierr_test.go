package apierr

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestWrite(t *testing.T) {
	var ctx fasthttp.RequestCtx
	ctx.SetBody([]byte("partial answer"))
	Write(&ctx, "t1", New(fasthttp.StatusConflict, Conflict, "run %s changed", "r1"))
	var got struct {
		Error struct{ Code, Message, TraceID string }
	}
	if err := json.Unmarshal(ctx.Response.Body(), &got); err != nil {
		t.Fatalf("body %q: %v", ctx.Response.Body(), err)
	}
	if ctx.Response.StatusCode() != 409 || got.Error.Code != Conflict || got.Error.Message != "run r1 changed" ||
		got.Error.TraceID != "t1" || string(ctx.Response.Header.ContentType()) != "application/json; charset=utf-8" {
		t.Fatalf("got %d %+v (%s)", ctx.Response.StatusCode(), got, ctx.Response.Header.ContentType())
	}
}

func TestWriteFallback(t *testing.T) {
	var ctx fasthttp.RequestCtx
	WriteFallback(&ctx, "t2")
	var got struct {
		Status, Message, TraceID string
		Error                    struct{ Code, TraceID string }
	}
	if err := json.Unmarshal(ctx.Response.Body(), &got); err != nil {
		t.Fatal(err)
	}
	if ctx.Response.StatusCode() != 503 || got.Status != "SERVICE_UNAVAILABLE" || got.Message != "Upstream service unavailable" ||
		got.TraceID != "t2" || got.Error.Code != Unavailable || got.Error.TraceID != "t2" ||
		string(ctx.Response.Header.Peek("Retry-After")) != "1" {
		t.Fatalf("got %d %+v", ctx.Response.StatusCode(), got)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestTransport(t *testing.T) {
	f := func(err error, status int, code string) {
		t.Helper()
		if e := Transport(err); e.Status != status || e.Code != code || e.Message == "" {
			t.Errorf("Transport(%v) = %+v, want %d %s", err, e, status, code)
		}
	}
	f(fmt.Errorf("reading: %w", fasthttp.ErrBodyTooLarge), 413, PayloadTooLarge)
	f(&fasthttp.ErrSmallBuffer{}, 431, HeaderTooLarge)
	f(timeoutErr{}, 408, Timeout)
	f(errors.New("cannot parse"), 400, BadRequest)
}
