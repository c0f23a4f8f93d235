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
	if !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() || isShared(a) {
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
	return fmt.Sprintf("the webhook's host %s is at %s, an address of this network (loopback, link-local or private): only hosts NOTIFY_ALLOW_HOSTS names may be", e.host, e.addr)
}

// cgnat is 100.64.0.0/10, shared address space (RFC 6598): as private as
// RFC 1918's for the purpose here.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

func isShared(a netip.Addr) bool { return cgnat.Contains(a) }

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
