package gatewayd

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/gateway"
)

// config is a Config that starts: loopback, a free port, the secrets, one
// static master at url.
func config(url string) Config {
	return Config{Bind: "127.0.0.1", Masters: []string{url},
		Proxy: gateway.Config{JWTSecret: []byte("gatewayd-test-jwt-secret"), SharedSecret: []byte("gatewayd-test-shared-secret")}}
}

func TestStart_Failure(t *testing.T) {
	f := func(name string, change func(*Config), usage bool, want string) {
		t.Helper()
		cfg := config("http://127.0.0.1:1")
		change(&cfg)
		g, err := Start(context.Background(), cfg)
		if err == nil {
			g.Close(context.Background())
			t.Fatalf("%s: started", name)
		}
		if !strings.Contains(err.Error(), want) || errors.As(err, new(ConfigError)) != usage {
			t.Fatalf("%s: %v (a ConfigError: %v), want %q (a ConfigError: %v)", name, err, errors.As(err, new(ConfigError)), want, usage)
		}
	}
	f("no JWT secret", func(c *Config) { c.Proxy.JWTSecret = nil }, false, "JWT_SECRET is not set")
	f("no shared secret", func(c *Config) { c.Proxy.SharedSecret = nil }, false, "GATEWAY_SHARED_SECRET is not set")
	f("no masters", func(c *Config) { c.Masters = nil }, true, "no masters")
	f("a master that is no URL", func(c *Config) { c.Masters = []string{"ftp://x"} }, true, "--masters: ")
	f("a canary that is no URL", func(c *Config) { c.CanaryMasters = []string{"x"} }, true, "--canary-masters: ")
}

func TestStart_ServesAndCloses(t *testing.T) {
	master := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"UP"}`)
	}))
	defer master.Close()
	g, err := Start(context.Background(), config(master.URL+"/"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(g.URL() + "/gateway-actuator/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "UP") {
		t.Fatalf("health: %d %s", resp.StatusCode, body)
	}
	g.Close(context.Background())
	if err := <-g.Err(); err != nil {
		t.Fatalf("after Close: %v", err)
	}
	if _, err := http.Get(g.URL() + "/gateway-actuator/health"); err == nil {
		t.Fatal("still answering after Close")
	}
}
