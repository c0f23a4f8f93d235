package httpapi

import (
	"net"
	"strings"
	"sync"
	"time"
)

// Sign-in throttling (issues 12, 25). Three counts, so that guessing is
// slow and nobody can lock another person out:
//   - a pair (user, address): at most loginFailures failed sign-ins per
//     loginWindow, then 429 with Retry-After, right password or not;
//   - one user from any address, and one address for any user (password
//     spraying): at most loginWideFailures, but not for a pair that signed
//     in rightly within loginKnownFor. An attacker elsewhere, or one behind
//     the lab's NAT trying other names, cannot lock a user out of the
//     address they sign in from; only one who shares the address and tries
//     the same name can, for a window.
//
// An IPv6 /64 is one address: a host gets a whole prefix. The counts live in
// this master's memory: with several masters behind a gateway, an attacker
// gets that many tries per master (docs/security.md).
const (
	loginFailures     = 5
	loginWideFailures = 20
	loginWindow       = time.Minute
	loginKnownFor     = 30 * 24 * time.Hour
	// maxThrottled bounds each table. Users are counted only when they
	// exist, so their tables cannot be flooded; a full table of addresses
	// (or of known pairs) stops taking new ones until its entries age out.
	maxThrottled = 1 << 16
)

// throttle counts failed sign-ins. Safe for concurrent use.
type throttle struct {
	mu    sync.Mutex
	pairs map[string][]time.Time // pairKey: failure times, oldest first, at most loginFailures
	users map[string][]time.Time // at most loginWideFailures
	addrs map[string][]time.Time // at most loginWideFailures
	known map[string]time.Time   // pairKey: the last right sign-in
	swept time.Time
}

func newThrottle() *throttle {
	return &throttle{pairs: map[string][]time.Time{}, users: map[string][]time.Time{},
		addrs: map[string][]time.Time{}, known: map[string]time.Time{}}
}

func pairKey(user, addr string) string { return strings.ToLower(user) + "\x00" + addrKey(addr) }

// addrKey is the throttled unit of an address: the address itself, or an
// IPv6 address's /64.
func addrKey(ip string) string {
	p := net.ParseIP(ip)
	if p == nil || p.To4() != nil {
		return ip
	}
	return p.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// wait returns how long user (when known) and addr must wait before they
// may try again; 0 when they may now.
func (th *throttle) wait(user, addr string, now time.Time) time.Duration {
	th.mu.Lock()
	defer th.mu.Unlock()
	th.sweepLocked(now)
	var d time.Duration
	known := false
	if user != "" {
		p := pairKey(user, addr)
		d = waitOf(th.pairs[p], loginFailures, now)
		last, ok := th.known[p]
		known = ok && now.Sub(last) < loginKnownFor
		if !known {
			d = max(d, waitOf(th.users[strings.ToLower(user)], loginWideFailures, now))
		}
	}
	if !known {
		d = max(d, waitOf(th.addrs[addrKey(addr)], loginWideFailures, now))
	}
	return d
}

// failed records a failed sign-in of user (when it exists: "" otherwise)
// from addr.
func (th *throttle) failed(user, addr string, now time.Time) {
	th.mu.Lock()
	defer th.mu.Unlock()
	th.sweepLocked(now)
	record(th.addrs, addrKey(addr), loginWideFailures, now)
	if user != "" {
		record(th.pairs, pairKey(user, addr), loginFailures, now)
		record(th.users, strings.ToLower(user), loginWideFailures, now)
	}
}

// succeeded forgets the user's failures (not the address's) and remembers
// the pair as one that signs in rightly.
func (th *throttle) succeeded(user, addr string, now time.Time) {
	th.mu.Lock()
	defer th.mu.Unlock()
	p := pairKey(user, addr)
	delete(th.pairs, p)
	delete(th.users, strings.ToLower(user))
	if _, ok := th.known[p]; ok || len(th.known) < maxThrottled {
		th.known[p] = now
	}
}

// waitOf: the time until the oldest of a full window of limit failures
// leaves it.
func waitOf(fails []time.Time, limit int, now time.Time) time.Duration {
	if len(fails) < limit {
		return 0
	}
	return max(fails[len(fails)-limit].Add(loginWindow).Sub(now), 0)
}

func record(m map[string][]time.Time, key string, limit int, now time.Time) {
	fails, ok := m[key]
	if !ok && len(m) >= maxThrottled {
		return
	}
	fails = recent(fails, now)
	if len(fails) == limit {
		fails = fails[1:]
	}
	m[key] = append(fails, now)
}

// recent drops the failures that left the window.
func recent(fails []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(fails) && !fails[i].Add(loginWindow).After(now) {
		i++
	}
	return fails[i:]
}

// sweepLocked forgets keys whose failures all left the window, at most once
// a window.
func (th *throttle) sweepLocked(now time.Time) {
	if now.Sub(th.swept) < loginWindow {
		return
	}
	th.swept = now
	for _, m := range []map[string][]time.Time{th.pairs, th.users, th.addrs} {
		for k, fails := range m {
			if len(recent(fails, now)) == 0 {
				delete(m, k)
			}
		}
	}
	for k, last := range th.known {
		if now.Sub(last) >= loginKnownFor {
			delete(th.known, k)
		}
	}
}
