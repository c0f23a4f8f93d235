package signature

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestSignature(t *testing.T) {
	s := NewSigner([]byte("secret-0123456789abcdef"))
	base := Fields{Method: "POST", Host: "gw.example:8081", Path: "/api/train", Query: "a=1", BodySHA256: emptySHA256,
		TraceID: "t1", Timestamp: "1700000000000", Nonce: "n1", ClientIP: "10.0.0.1",
		UserID: "42", UserName: "alice", UserRole: "USER", Version: "0"}
	sig := s.Sign(&base)
	if len(sig) != 64 || strings.Trim(sig, "0123456789abcdef") != "" {
		t.Fatalf("signature %q is not 64 hex characters", sig)
	}
	if !s.Valid(&base, sig) || !s.Valid(&base, strings.ToUpper(sig)) {
		t.Fatal("a signature does not verify")
	}
	// Every field is covered, and moving text across a field boundary
	// changes the signature.
	for _, edit := range []func(f *Fields){
		func(f *Fields) { f.Method = "GET" },
		func(f *Fields) { f.Host = "evil.example" },
		func(f *Fields) { f.Path = "/api/tasks" },
		func(f *Fields) { f.Query = "a=2" },
		func(f *Fields) { f.BodySHA256 = strings.Repeat("0", 64) },
		func(f *Fields) { f.Nonce = "n2" },
		func(f *Fields) { f.ClientIP = "10.0.0.2" },
		func(f *Fields) { f.Version = "1" },
		func(f *Fields) { f.Path, f.Query = "/api/train?a=1", "" },
		func(f *Fields) { f.TraceID = "t2" },
		func(f *Fields) { f.Timestamp = "1700000000001" },
		func(f *Fields) { f.UserID = "43" },
		func(f *Fields) { f.UserName = "bob" },
		func(f *Fields) { f.UserRole = "ADMIN" },
		func(f *Fields) { f.UserID, f.UserName = "4", "2alice" },
	} {
		f := base
		edit(&f)
		if s.Valid(&f, sig) {
			t.Errorf("%+v verifies with the signature of %+v", f, base)
		}
	}
	if NewSigner([]byte("another-secret-0123456")).Valid(&base, sig) {
		t.Error("another secret verifies")
	}
	for _, bad := range []string{"", "zz", sig[:63], sig + "0", strings.Repeat("g", 64)} {
		if s.Valid(&base, bad) {
			t.Errorf("%q verifies", bad)
		}
	}
}

func TestFresh(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	f := func(ts string, want bool) {
		t.Helper()
		if got := Fresh(ts, now, 300*time.Second); got != want {
			t.Errorf("Fresh(%q) = %v, want %v", ts, got, want)
		}
	}
	f(Timestamp(now), true)
	f(Timestamp(now.Add(-300*time.Second)), true)
	f(Timestamp(now.Add(300*time.Second)), true)
	f(Timestamp(now.Add(-301*time.Second)), false)
	f(Timestamp(now.Add(301*time.Second)), false)
	f("", false)
	f("abc", false)
	f("-5", false)
	f("1700000000", false) // seconds, not milliseconds: 1970
}

// TestOf: the fields the gateway signs are the fields the master reads back
// from what it received; a changed body, query or header changes them.
func TestOf(t *testing.T) {
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.Header.SetRequestURI("/api/tasks/r1/rerun?x=%2F1#frag")
	req.Header.SetHost("127.0.0.1:8082")
	req.Header.Set(HeaderForwardedHost, "gw.example:8081")
	req.Header.Set("X-Trace-Id", "t1")
	req.Header.Set(HeaderTimestamp, "1700000000000")
	req.Header.Set(HeaderNonce, "n1")
	req.Header.Set(HeaderClientIP, "10.0.0.1")
	req.Header.Set(HeaderUserID, "42")
	req.Header.Set(HeaderUserName, "alice")
	req.Header.Set(HeaderUserRole, "USER")
	req.Header.Set(HeaderTokenVersion, "3")
	req.SetBodyString(`{"gpus":1}`)
	f := Of(&req)
	sum := sha256.Sum256([]byte(`{"gpus":1}`))
	want := Fields{Method: "POST", Host: "gw.example:8081", Path: "/api/tasks/r1/rerun", Query: "x=%2F1",
		BodySHA256: hex.EncodeToString(sum[:]), TraceID: "t1", Timestamp: "1700000000000", Nonce: "n1",
		ClientIP: "10.0.0.1", UserID: "42", UserName: "alice", UserRole: "USER", Version: "3"}
	if f != want {
		t.Fatalf("Of = %+v\nwant %+v", f, want)
	}
	s := NewSigner([]byte("secret-0123456789abcdef"))
	sig := s.Sign(&f)

	// On the wire and parsed again, as the master receives it.
	req.Header.Set(HeaderSignature, sig)
	var got fasthttp.Request
	if err := got.Read(bufio.NewReader(strings.NewReader(req.String()))); err != nil {
		t.Fatal(err)
	}
	if g := Of(&got); !s.Valid(&g, string(got.Header.Peek(HeaderSignature))) || !s.ValidRequest(&got) {
		t.Fatalf("the received request does not verify: %+v", g)
	}
	if a := string(s.AppendRequest(nil, &req)); a != sig {
		t.Fatalf("AppendRequest %s, Sign(Of) %s", a, sig)
	}
	got.SetBodyString(`{"gpus":8}`)
	if g := Of(&got); s.Valid(&g, sig) || s.ValidRequest(&got) {
		t.Fatal("another body verifies")
	}
	var empty fasthttp.Request
	if Of(&empty).BodySHA256 != emptySHA256 {
		t.Fatal("the empty body's hash is wrong")
	}
}

func TestNonces(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_500)
	c := NewNonces(300*time.Second, 0)
	ts := now.UnixMilli()
	if err := c.Check("a", ts, now); err != nil {
		t.Fatal(err)
	}
	if err := c.Check("a", ts, now); !errors.Is(err, ErrReplayed) {
		t.Fatalf("replay: %v", err)
	}
	if err := c.Check("b", ts, now); err != nil {
		t.Fatal(err)
	}
	if err := c.Check("a", ts-301_000, now); !errors.Is(err, ErrTooOld) {
		t.Fatalf("outside the window: %v", err)
	}
	// Past the window a nonce is forgotten (and its timestamp refused).
	later := now.Add(301 * time.Second)
	if err := c.Check("c", later.UnixMilli(), later); err != nil || c.Len() != 1 {
		t.Fatalf("after the window: %v, %d remembered", err, c.Len())
	}
}

// TestNoncesBounded: a full cache forgets its oldest second and refuses
// timestamps of it from then on, so a forgotten nonce is never admitted
// twice.
func TestNoncesBounded(t *testing.T) {
	now := time.UnixMilli(1_700_000_100_000)
	c := NewNonces(300*time.Second, 4)
	old := now.Add(-10 * time.Second).UnixMilli()
	for _, n := range []string{"o1", "o2"} {
		if err := c.Check(n, old, now); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"n1", "n2", "n3"} { // the fifth evicts the old second
		if err := c.Check(n, now.UnixMilli(), now); err != nil {
			t.Fatal(err)
		}
	}
	if c.Len() > 4 {
		t.Fatalf("%d remembered, bound 4", c.Len())
	}
	if err := c.Check("o1", old, now); !errors.Is(err, ErrTooOld) {
		t.Fatalf("a forgotten nonce: %v, want ErrTooOld", err)
	}
	if err := c.Check("n1", now.UnixMilli(), now); !errors.Is(err, ErrReplayed) {
		t.Fatalf("a remembered nonce: %v", err)
	}
}

func TestNoncesConcurrent(t *testing.T) {
	now := time.Now()
	c := NewNonces(time.Minute, 0)
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for range 8 {
		wg.Go(func() {
			for i := range 1000 {
				if c.Check(strconv.Itoa(i), now.UnixMilli(), now) == nil {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 1000 {
		t.Fatalf("%d admitted, want each of 1000 nonces once", admitted.Load())
	}
}
