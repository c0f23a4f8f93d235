// Package crosssite refuses what a browser can be tricked into sending to an
// rlsched server: a request under a name that is not one of the server's
// own (DNS rebinding: a page on evil.example whose name now points at the
// server), and a state-changing request signed in by the cookie that did not
// come from the server's own pages (CSRF). The master and the gateway both
// run it.
//
// It never looks at tokens or identities, and it never trusts a header a
// client could forge in a cross-site request (Origin and Sec-Fetch-Site are
// set by the browser, not by the page).
package crosssite

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// Hosts is the set of names a server answers to (PUBLIC_HOSTS and the
// defaults). A name with a port matches that port only; one without matches
// any. The zero value allows nothing; Add is safe beside Allows on other
// goroutines.
type Hosts struct {
	set atomic.Pointer[hostSet]
	off atomic.Bool
}

type hostSet struct {
	exact   map[string]bool // "host:port"
	anyPort map[string]bool // "host"
}

// normalise lowercases a host, drops a trailing dot and the brackets of an
// IPv6 literal, and splits off the port ("" when absent). ok is false for
// what cannot be a host.
func normalise(hostport string) (host, port string, ok bool) {
	hostport = strings.ToLower(strings.TrimSpace(hostport))
	if hostport == "" || strings.ContainsAny(hostport, "/?#@ \t") {
		return "", "", false
	}
	host = hostport
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
			return "", "", false
		}
		host, port = h, p
	} else if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") {
		host = hostport[1 : len(hostport)-1]
	} else if strings.Count(hostport, ":") > 0 && net.ParseIP(hostport) == nil {
		return "", "", false // "host:" or "host:port:x"
	}
	host = strings.TrimSuffix(host, ".")
	return host, port, host != ""
}

// Add admits names ("host", "host:port", "[::1]:8081"); "*" turns the check
// off. It returns an error naming the first one that is not a host.
func (h *Hosts) Add(names ...string) error {
	old := h.set.Load()
	n := &hostSet{exact: map[string]bool{}, anyPort: map[string]bool{}}
	if old != nil {
		for k := range old.exact {
			n.exact[k] = true
		}
		for k := range old.anyPort {
			n.anyPort[k] = true
		}
	}
	for _, name := range names {
		if strings.TrimSpace(name) == "*" {
			h.off.Store(true)
			continue
		}
		host, port, ok := normalise(name)
		if !ok {
			return fmt.Errorf("%q is not a host name, host:port or [IPv6]:port", name)
		}
		if port == "" {
			n.anyPort[host] = true
		} else {
			n.exact[net.JoinHostPort(host, port)] = true
		}
	}
	h.set.Store(n)
	return nil
}

// Off reports whether the check is off ("*").
func (h *Hosts) Off() bool { return h.off.Load() }

// Allows reports whether a request's Host header names this server. A Host
// without a port matches a name without one, or one on port 80 or 443 (the
// scheme's default, which a proxy in front may have used).
func (h *Hosts) Allows(hostHeader []byte) bool {
	if h.off.Load() {
		return true
	}
	s := h.set.Load()
	if s == nil {
		return false
	}
	host, port, ok := normalise(string(hostHeader))
	if !ok {
		return false
	}
	if s.anyPort[host] {
		return true
	}
	if port == "" {
		return s.exact[net.JoinHostPort(host, "80")] || s.exact[net.JoinHostPort(host, "443")]
	}
	return s.exact[net.JoinHostPort(host, port)]
}

// Names lists the admitted names, for the log line at start.
func (h *Hosts) Names() []string {
	if h.off.Load() {
		return []string{"*"}
	}
	s := h.set.Load()
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.exact)+len(s.anyPort))
	for k := range s.anyPort {
		out = append(out, k)
	}
	for k := range s.exact {
		out = append(out, k)
	}
	return out
}

// DefaultNames are the names of a server listening on addr: localhost,
// 127.0.0.1 and [::1], and the bound address, with the listen port; for an
// address bound to every interface, each interface's address and this
// machine's host name too.
func DefaultNames(addr net.Addr) []string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return nil
	}
	port := strconv.Itoa(ta.Port)
	names := []string{"localhost", "127.0.0.1", "::1"}
	if ta.IP == nil || ta.IP.IsUnspecified() {
		if ifs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range ifs {
				if n, ok := a.(*net.IPNet); ok {
					names = append(names, n.IP.String())
				}
			}
		}
		if hn, err := os.Hostname(); err == nil && hn != "" {
			names = append(names, hn)
		}
	} else {
		names = append(names, ta.IP.String())
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, net.JoinHostPort(n, port))
	}
	return out
}

// SplitList splits a comma- or space-separated PUBLIC_HOSTS value.
func SplitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
}
