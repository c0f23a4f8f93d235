package notify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/rlsched/rlsched/internal/crosssite"
)

// MaxURLBytes bounds a webhook URL.
const MaxURLBytes = 2048

// Targets decides where webhooks may go (NOTIFY_ALLOW_HOSTS). With no list,
// any http or https host whose every address is public; with a list, only
// the hosts it names (a name, an address, or a network in CIDR form), and
// those also at loopback, link-local or private addresses. Addresses are
// checked when a URL is set and again at each connection, on the address
// actually dialled, so a name that later resolves elsewhere (DNS
// rebinding) reaches nothing it could not reach when set. Safe for
// concurrent use; its zero value allows any public host.
type Targets struct {
	names map[string]bool // lower case, no trailing dot
	nets  []netip.Prefix
}

// ParseTargets reads NOTIFY_ALLOW_HOSTS: host names, addresses and CIDR
// networks, separated by commas or spaces; empty: any public host.
func ParseTargets(list string) (*Targets, error) {
	t := &Targets{names: map[string]bool{}}
	for _, e := range crosssite.SplitList(list) {
		if p, err := netip.ParsePrefix(e); err == nil {
			t.nets = append(t.nets, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
			t.nets = append(t.nets, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		name := normName(e)
		if name == "" || strings.ContainsAny(name, "/:@") {
			return nil, fmt.Errorf("NOTIFY_ALLOW_HOSTS: %q is not a host name, an address or a CIDR network", e)
		}
		t.names[name] = true
	}
	return t, nil
}

func normName(h string) string { return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".") }

// limited reports whether a list was given.
func (t *Targets) limited() bool { return t != nil && (len(t.names) > 0 || len(t.nets) > 0) }

// inNets reports whether a is in one of the listed networks.
func (t *Targets) inNets(a netip.Addr) bool {
	if t == nil {
		return false
	}
	for _, p := range t.nets {
		if p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// CheckURL parses raw as a webhook URL: http or https, a host, no more
// than MaxURLBytes, and a host the list allows (when there is one).
func (t *Targets) CheckURL(raw string) (*url.URL, error) {
	if len(raw) > MaxURLBytes {
		return nil, fmt.Errorf("the webhook URL is longer than %d bytes", MaxURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("the webhook is not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, errors.New("the webhook must be an http:// or https:// URL")
	}
	host := u.Hostname()
	if host == "" {
		return nil, errors.New("the webhook URL has no host")
	}
	if t.limited() && !t.names[normName(host)] {
		a, err := netip.ParseAddr(host)
		if err != nil || !t.inNets(a) {
			return nil, fmt.Errorf("NOTIFY_ALLOW_HOSTS does not name %s: ask the admin to add it", host)
		}
	}
	return u, nil
}

// checkAddr says whether host (as written in the URL) may be reached at a.
func (t *Targets) checkAddr(host string, a netip.Addr) error {
	a = a.Unmap()
	if t.limited() && (t.names[normName(host)] || t.inNets(a)) {
		return nil // named by the admin: private addresses too
	}
	if !Public(a) {
		return &refusedError{host, a}
	}
	return nil
}

// refusedError: a webhook's host is at an address Targets refuses.
type refusedError struct {
	host string
	addr netip.Addr
}

func (e *refusedError) Error() string {
	why := "not a public address"
	switch {
	case e.addr.IsLoopback():
		why = "a loopback address"
	case e.addr.IsLinkLocalUnicast():
		why = "a link-local address"
	case e.addr.IsPrivate(), sharedV4.Contains(e.addr):
		why = "a private address"
	}
	return fmt.Sprintf("the webhook's host %s is at %s, %s: only public hosts, or the ones NOTIFY_ALLOW_HOSTS names, may be", e.host, e.addr, why)
}

// Public reports whether a is an address of the public internet, by an
// allow-list: IPv4 outside every block of IANA's special-purpose registry
// that is not globally reachable, IPv6 only inside 2000::/3 (global
// unicast) and outside its special blocks. The blocks that carry an IPv4
// address inside an IPv6 one (IPv4-mapped is unmapped first; NAT64,
// 6to4, Teredo, IPv4-compatible) are refused whole: a translator on the
// way could turn them into any address of this network, so a deny-list of
// what they embed is one prefix short of enough.
func Public(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	if a.Is4() {
		for _, p := range notGlobalV4 {
			if p.Contains(a) {
				return false
			}
		}
		return true
	}
	if !globalUnicastV6.Contains(a) {
		return false // ::/8 (IPv4-compatible, loopback), 64:ff9b::/96, fc00::/7, fe80::/10, ff00::/8 ...
	}
	for _, p := range notGlobalV6 {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// sharedV4 is 100.64.0.0/10, shared address space (RFC 6598): as private
// as RFC 1918's for the purpose here.
var sharedV4 = netip.MustParsePrefix("100.64.0.0/10")

// notGlobalV4 are IANA's IPv4 special-purpose blocks that are not
// globally reachable, with multicast and the reserved 240/4.
var notGlobalV4 = prefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
	"192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
	"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
)

// globalUnicastV6 is the only IPv6 space a webhook may be in.
var globalUnicastV6 = netip.MustParsePrefix("2000::/3")

// notGlobalV6 are the special-purpose blocks inside 2000::/3: the IETF
// protocol assignments (Teredo 2001::/32, ORCHID, benchmarking),
// documentation, 6to4 and SRv6 SIDs.
var notGlobalV6 = prefixes("2001::/23", "2001:db8::/32", "2002::/16", "3fff::/20")

func prefixes(ps ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

// resolve returns host's addresses (host itself when it is one).
func resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	as, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("cannot resolve the webhook's host %s: %w", host, err)
	}
	return as, nil
}

// Check is CheckURL, then the host's every address must be allowed: what
// a user setting a webhook is told at once.
func (t *Targets) Check(ctx context.Context, raw string) error {
	u, err := t.CheckURL(raw)
	if err != nil {
		return err
	}
	as, err := resolve(ctx, u.Hostname())
	if err != nil {
		return err
	}
	for _, a := range as {
		if err := t.checkAddr(u.Hostname(), a); err != nil {
			return err
		}
	}
	return nil
}

// dialContext connects to addr (host:port of a webhook URL) at an address
// checkAddr allows, dialling the address checked, never the name again.
func (t *Targets) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	as, err := resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	var last error
	for _, a := range as {
		if err := t.checkAddr(host, a); err != nil {
			last = err
			continue
		}
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	if last == nil {
		last = fmt.Errorf("the webhook's host %s has no address", host)
	}
	return nil, last
}
