package gateway_test

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/gateway/discovery"
	"github.com/rlsched/rlsched/internal/testkit/nacostest"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// Two masters register in a real Nacos-protocol server (Polaris), one as a
// canary; a gateway follows them. A master that leaves (deregistered on
// SIGTERM, or dropped by the server after a SIGKILL) leaves the routes and
// comes back when it starts again.
func TestProcessNacosDiscovery(t *testing.T) {
	b := newBed(t)
	nacos := nacostest.Start(t)
	env := "NACOS_ADDR=" + nacos.Addr
	stable := b.startMaster("stable-1", 0, env)
	canary := b.startMaster("canary-1", 0, env, "SERVICE_NAME="+discovery.ServiceCanary)
	ms := []*master{stable, canary}
	alice := registerOn(t, ms, "alice")
	g := b.StartGateway("gw", []string{env})

	// want waits until the routes hold exactly the masters of want (by URL:
	// service), each available: one that left is gone from the list, not
	// merely marked unhealthy by the gateway's checks. A URL in lingering
	// may also still be listed, but only as unavailable.
	want := func(what string, want map[string]string, lingering ...string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, func() (bool, string) {
			r := routes(t, g.URL, alice.token)
			got := map[string]string{}
			for _, rt := range r.Routes {
				for _, in := range rt.Instances {
					if in.Source != "nacos" {
						continue
					}
					if !in.Available && slices.Contains(lingering, in.URL) {
						continue
					}
					got[in.URL] = in.Service
					if !in.Available {
						got[in.URL] += " (unavailable)"
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return false, fmt.Sprintf("%s: routes %v, want %v", what, got, want)
			}
			return true, ""
		})
	}
	both := map[string]string{stable.URL: discovery.ServiceStable, canary.URL: discovery.ServiceCanary}
	want("both registered", both)
	r := routes(t, g.URL, alice.token)
	if in, _ := instance(r, canary.URL); !in.Canary || in.Metadata["masterId"] != "canary-1" || in.Metadata["canary"] != "true" {
		t.Fatalf("canary instance %+v", in)
	}
	route := func(header ...string) (string, string) {
		a := do(t, "GET", g.URL+"/api/monitor/health", "", append(bearer(alice.token), header...)...)
		return healthMaster(t, a), a.Header.Get("X-Upstream-Service")
	}
	if m, svc := route(); m != "stable-1" || svc != discovery.ServiceStable {
		t.Fatalf("plain request went to %s (%s)", m, svc)
	}
	if m, svc := route("X-Canary", "true"); m != "canary-1" || svc != discovery.ServiceCanary {
		t.Fatalf("X-Canary request went to %s (%s)", m, svc)
	}

	// SIGTERM: the canary deregisters on its way out.
	canary.Stop(t, syscall.SIGTERM, 15*time.Second)
	canary.WaitMessage(t, 5*time.Second, "deregistered from Nacos")
	want("canary stopped", map[string]string{stable.URL: discovery.ServiceStable})
	if m, _ := route("X-Canary", "true"); m != "stable-1" {
		t.Fatalf("with no canary, X-Canary went to %s", m)
	}
	b.Restart(canary)
	want("canary back", both)
	if m, _ := route("X-Canary", "true"); m != "canary-1" {
		t.Fatalf("X-Canary went to %s after the canary came back", m)
	}

	// SIGKILL: no goodbye. The server marks the ephemeral instance
	// unhealthy once its heartbeats stop and drops it later (Polaris: when
	// it notices the client's connection gone, or only after the instance's
	// expiry, which can be past the 30 s here on a loaded machine); either
	// way the gateway stops routing to it once it is unhealthy, which is
	// what this checks: listed unavailable, or gone.
	stable.Stop(t, syscall.SIGKILL, 15*time.Second)
	want("stable killed", map[string]string{canary.URL: discovery.ServiceCanary}, stable.URL)
	b.Restart(stable)
	want("stable back", both)
	if m, _ := route(); m != "stable-1" {
		t.Fatalf("plain request went to %s after the stable master came back", m)
	}
}
