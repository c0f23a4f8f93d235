package rig

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestServerEnvDropsSettings(t *testing.T) {
	t.Setenv("JWT_SECRET", "leaked")
	t.Setenv("RLSCHED_ANYTHING", "leaked")
	t.Setenv("GATEWAY_SHARED_SECRET", "leaked")
	t.Setenv("RIG_TEST_KEPT", "kept")
	env := ServerEnv("LOG_LEVEL=warn")
	for _, kv := range env {
		if kv == "JWT_SECRET=leaked" || kv == "RLSCHED_ANYTHING=leaked" || kv == "GATEWAY_SHARED_SECRET=leaked" {
			t.Errorf("%s reached a server", kv)
		}
	}
	if !slices.Contains(env, "RIG_TEST_KEPT=kept") {
		t.Error("an unrelated variable was dropped")
	}
	if i, j := slices.Index(env, "LOG_LEVEL=info"), slices.Index(env, "LOG_LEVEL=warn"); i < 0 || j < i {
		t.Errorf("extra entries must come last to win: %v", env)
	}
}

func TestDo(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", r.Host+" "+r.Header.Get("Authorization")+" "+r.Header.Get("Content-Type")+" "+r.Header.Get("X-A"))
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	r, err := Do(srv.Client(), "POST", srv.URL, "tok", map[string]int{"a": 1}, "Host", "example.test", "X-A", "b")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Header.Get("X-Seen"), "example.test Bearer tok application/json b"; r.Status != 201 || got != want {
		t.Fatalf("got %d %q, want 201 %q", r.Status, got, want)
	}
	var v struct{ OK bool }
	if r.JSON(t, &v); !v.OK {
		t.Fatalf("body %s", r.Body)
	}
}

func TestParseLogSkipsPartialAndForeignLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	data := "guard: hello\n{\"message\":\"one\",\"n\":2}\n{\"message\":\"two\""
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	ls := ParseLog(path)
	if len(ls) != 1 || ls[0].Msg() != "one" || ls[0].Str("n") != "2" || ls[0].Str("absent") != "" {
		t.Fatalf("lines %v", ls)
	}
}
