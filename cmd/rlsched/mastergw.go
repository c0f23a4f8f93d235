package main

import (
	"os"

	"github.com/rlsched/rlsched/gateway/discovery"
	"github.com/rlsched/rlsched/masterd"
)

// defineGatewayTrust adds a master's flags towards the gateway: whether it
// believes the identity the gateway signs, and its registration in Nacos.
func defineGatewayTrust(f envFlags, g *masterd.Gateway, nacos *nacosOpts) {
	envBool(f, &g.TrustHeaders, "gateway-trust-headers", "GATEWAY_TRUST_HEADERS", false,
		"believe the identity headers the gateway signs (needs GATEWAY_SHARED_SECRET)")
	envBool(f, &g.Require, "gateway-require", "GATEWAY_REQUIRE", false,
		"refuse authenticated requests the gateway did not sign (implies --gateway-trust-headers)")
	f.seconds(&g.MaxSkew, "gateway-max-skew-seconds", "GATEWAY_MAX_SKEW_SECONDS", 300, "oldest gateway signature accepted, in `seconds`")
	nacos.define(f)
	f.str(&g.ServiceName, "service-name", "SERVICE_NAME", discovery.ServiceStable,
		"Nacos service to register as: "+discovery.ServiceStable+", or "+discovery.ServiceCanary+" for a canary")
	f.str(&g.Advertise, "advertise-host", "RLSCHED_ADVERTISE_HOST", "",
		"host the gateways reach this master at (default: the bind address, or this machine's first non-loopback IPv4)")
	g.SharedSecret = os.Getenv("GATEWAY_SHARED_SECRET")
}
