package signature

import (
	"strings"
	"testing"
	"time"
)

func TestSignature(t *testing.T) {
	s := NewSigner([]byte("secret-0123456789abcdef"))
	base := Fields{Method: "POST", Path: "/api/train", TraceID: "t1", Timestamp: "1700000000000",
		UserID: "42", UserName: "alice", UserRole: "USER"}
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
		func(f *Fields) { f.Path = "/api/tasks" },
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
