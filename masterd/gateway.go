package masterd

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/gateway/discovery"
	"github.com/rlsched/rlsched/httpapi"
)

// Gateway is a master's settings towards the gateways: whether it believes
// the identity they sign, and its registration in Nacos.
type Gateway struct {
	TrustHeaders bool          // GATEWAY_TRUST_HEADERS: believe the identity headers a gateway signed
	Require      bool          // GATEWAY_REQUIRE: refuse authenticated requests no gateway signed (implies TrustHeaders)
	MaxSkew      time.Duration // GATEWAY_MAX_SKEW_SECONDS: the oldest signature accepted
	SharedSecret string        // GATEWAY_SHARED_SECRET (environment only)

	Nacos       discovery.Options // NACOS_*: register there when Nacos.Addr is set
	ServiceName string            // SERVICE_NAME: discovery.ServiceStable or discovery.ServiceCanary
	Advertise   string            // RLSCHED_ADVERTISE_HOST; default the bind address or the first non-loopback IPv4
}

// apply sets the gateway trust of the master's REST API.
func (g Gateway) apply(cfg *httpapi.Config) {
	cfg.GatewayTrustHeaders = g.TrustHeaders || g.Require
	cfg.GatewayRequire = g.Require
	cfg.GatewaySharedSecret = []byte(g.SharedSecret)
	cfg.GatewayMaxSkew = g.MaxSkew
}

// register announces the master in Nacos when NACOS_ADDR is set; the
// returned registration (nil without Nacos) deregisters on Close.
func (g Gateway) register(httpAddr net.Addr, bind, masterID, rpcAddr string, log zerolog.Logger) (*discovery.Registration, error) {
	if g.Nacos.Addr == "" {
		return nil, nil
	}
	service := g.ServiceName
	if service == "" {
		service = discovery.ServiceStable
	}
	if service != discovery.ServiceStable && service != discovery.ServiceCanary {
		return nil, fmt.Errorf("SERVICE_NAME must be %s or %s, not %q", discovery.ServiceStable, discovery.ServiceCanary, service)
	}
	ta, ok := httpAddr.(*net.TCPAddr)
	if !ok {
		return nil, errors.New("BUG: the REST listener is not TCP")
	}
	host := g.Advertise
	if host == "" {
		host = advertiseHost(bind)
	}
	canary := strconv.FormatBool(service == discovery.ServiceCanary)
	opts := g.Nacos
	opts.Logger = log
	return discovery.Register(opts, discovery.Instance{
		Service: service, IP: host, Port: uint64(ta.Port),
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
