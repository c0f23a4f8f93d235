package gateway

import (
	"net"
	"strconv"

	"github.com/rlsched/rlsched/gateway/discovery"
)

// sourceNacos names Nacos's routes in the gateway.
const sourceNacos = "nacos"

// WatchNacos feeds g with the instances of rl-master and rl-master-canary.
// An instance of rl-master whose metadata says canary=true is a canary too.
func (g *Gateway) WatchNacos(o discovery.Options) (*discovery.Watcher, error) {
	return discovery.Watch(o, []string{discovery.ServiceStable, discovery.ServiceCanary}, func(svc string, insts []discovery.Instance) {
		out := make([]Instance, 0, len(insts))
		for _, in := range insts {
			out = append(out, Instance{
				URL:      "http://" + net.JoinHostPort(in.IP, strconv.FormatUint(in.Port, 10)),
				Service:  svc,
				Canary:   svc == discovery.ServiceCanary || in.Metadata["canary"] == "true",
				Down:     !in.Healthy || !in.Enabled,
				Metadata: in.Metadata,
			})
		}
		if err := g.SetInstances(sourceNacos, svc, out); err != nil {
			o.Logger.Warn().Err(err).Str("service", svc).Msg("Nacos reported an instance the gateway cannot use")
		}
	})
}
