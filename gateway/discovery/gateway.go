package discovery

import (
	"net"
	"strconv"

	"github.com/rlsched/rlsched/gateway"
)

// Source names Nacos's routes in the gateway.
const Source = "nacos"

// WatchGateway feeds g with the instances of rl-master and rl-master-canary.
// An instance of rl-master whose metadata says canary=true is a canary too.
func WatchGateway(o Options, g *gateway.Gateway) (*Watcher, error) {
	return Watch(o, []string{ServiceStable, ServiceCanary}, func(svc string, insts []Instance) {
		out := make([]gateway.Instance, 0, len(insts))
		for _, in := range insts {
			out = append(out, gateway.Instance{
				URL:      "http://" + net.JoinHostPort(in.IP, strconv.FormatUint(in.Port, 10)),
				Service:  svc,
				Canary:   svc == ServiceCanary || in.Metadata["canary"] == "true",
				Down:     !in.Healthy || !in.Enabled,
				Metadata: in.Metadata,
			})
		}
		if err := g.SetInstances(Source, svc, out); err != nil {
			o.Logger.Warn().Err(err).Str("service", svc).Msg("Nacos reported an instance the gateway cannot use")
		}
	})
}
