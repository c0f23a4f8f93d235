package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/gateway"
	"github.com/rlsched/rlsched/gateway/discovery"
	"github.com/rlsched/rlsched/httpapi"
)

// masterGatewayOpts are a master's settings towards the gateway: whether it
// believes the identity the gateway signs, and its registration in Nacos.
type masterGatewayOpts struct {
	trustHeaders, require bool
	maxSkew               int // seconds
	sharedSecret          string
	nacos                 nacosOpts
	serviceName           string
	advertise             string
}

func (o *masterGatewayOpts) define(f envFlags) {
	envBool(f, &o.trustHeaders, "gateway-trust-headers", "GATEWAY_TRUST_HEADERS", false,
		"believe the identity headers the gateway signs (needs GATEWAY_SHARED_SECRET)")
	envBool(f, &o.require, "gateway-require", "GATEWAY_REQUIRE", false,
		"refuse authenticated requests the gateway did not sign (implies --gateway-trust-headers)")
	f.int(&o.maxSkew, "gateway-max-skew-seconds", "GATEWAY_MAX_SKEW_SECONDS", 300, "oldest gateway signature accepted")
	o.nacos.define(f)
	f.str(&o.serviceName, "service-name", "SERVICE_NAME", gateway.ServiceStable,
		"Nacos service to register as: "+gateway.ServiceStable+", or "+gateway.ServiceCanary+" for a canary")
	f.str(&o.advertise, "advertise-host", "RLSCHED_ADVERTISE_HOST", "",
		"host the gateways reach this master at (default: the bind address, or this machine's first non-loopback IPv4)")
	o.sharedSecret = os.Getenv("GATEWAY_SHARED_SECRET")
}

// apply sets the gateway trust of the master's REST API.
func (o masterGatewayOpts) apply(cfg *httpapi.Config) {
	cfg.GatewayTrustHeaders = o.trustHeaders || o.require
	cfg.GatewayRequire = o.require
	cfg.GatewaySharedSecret = []byte(o.sharedSecret)
	cfg.GatewayMaxSkew = seconds(o.maxSkew)
}

// register announces the master in Nacos when NACOS_ADDR is set; the
// returned registration (nil without Nacos) deregisters on Close.
func (o masterGatewayOpts) register(httpAddr net.Addr, bind, masterID, rpcAddr string, log zerolog.Logger) (*discovery.Registration, error) {
	if o.nacos.addr == "" {
		return nil, nil
	}
	if o.serviceName != gateway.ServiceStable && o.serviceName != gateway.ServiceCanary {
		return nil, fmt.Errorf("SERVICE_NAME must be %s or %s, not %q", gateway.ServiceStable, gateway.ServiceCanary, o.serviceName)
	}
	ta, ok := httpAddr.(*net.TCPAddr)
	if !ok {
		return nil, errors.New("BUG: the REST listener is not TCP")
	}
	host := o.advertise
	if host == "" {
		host = advertiseHost(bind)
	}
	canary := strconv.FormatBool(o.serviceName == gateway.ServiceCanary)
	return discovery.Register(o.nacos.options(log), discovery.Instance{
		Service: o.serviceName, IP: host, Port: uint64(ta.Port),
		Metadata: map[string]string{
			"masterId": masterID, "rpc": rpcAddr, "version": core.Version, "canary": canary,
			"startedAt": time.Now().UTC().Format(time.RFC3339),
		},
	})
}

// advertiseHost is the bind address when it names one, else the first
// non-loopback IPv4 of this machine, else loopback.
func advertiseHost(bind string) string {
	if ip := net.ParseIP(bind); ip != nil && !ip.IsUnspecified() {
		return bind
	}
	if bind != "" && net.ParseIP(bind) == nil {
		return bind // a host name
	}
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}
