package main

import (
	"net"
	"net/url"
	"strconv"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/masterd"
)

// warnOpenBind warns when what listens at rawURL on all interfaces and no
// TLS proxy was declared: passwords and tokens then cross the network in
// clear.
func warnOpenBind(log zerolog.Logger, what, rawURL string, tlsProxy bool) {
	if tlsProxy {
		return
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsUnspecified() {
		return
	}
	log.Warn().Str("url", rawURL).Msg(what + " listens on all interfaces without TLS: passwords and tokens cross the network in clear. " +
		"Put a TLS proxy in front (docs/deploy.md, nginx) and set RLSCHED_TLS_PROXY=true, or bind to 127.0.0.1 (--bind)")
}

// upPublicURL is the gateway's address under `rlsched up`, as users open
// it; empty when the port is not known yet (0: any free one).
func upPublicURL(mc masterd.Config, port int) string {
	if port == 0 {
		return ""
	}
	host := mc.Bind
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(port))
}
