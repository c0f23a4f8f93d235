package httpapi

import (
	"net"
	"strings"
	"sync"
	"time"
)

// Sign-in throttling (issue 12): at most loginFailures failed sign-ins per
// loginWindow for one user, and as many from one address (an IPv6 /64 is
// one address: a host gets a whole prefix); the next sign-in is 429 with
// Retry-After, right password or not. The counts live in this master's
// memory: with several masters behind a gateway, an attacker gets that many
// tries per master (docs/security.md).
const (
	loginFailures = 5
	loginWindow   = time.Minute
	// maxThrottled bounds each table. Users are counted only when they
	// exist, so their table cannot be flooded; a full table of addresses
	// stops taking new ones (the per-user count still holds) until its
	// entries age out.
	maxThrottled = 1 << 16
)

// throttle counts failed sign-ins. Safe for concurrent use.
type throttle struct {
	mu    sync.Mutex
	users map[string][]time.Time // failure times, oldest first, at most loginFailures
	addrs map[string][]time.Time
	swept time.Time
}

func newThrottle() *throttle {
	return &throttle{users: map[string][]time.Time{}, addrs: map[string][]time.Time{}}
}

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
	d := waitOf(th.addrs[addrKey(addr)], now)
	if user != "" {
		d = max(d, waitOf(th.users[strings.ToLower(user)], now))
	}
	return d
}

// failed records a failed sign-in of user (when it exists: "" otherwise)
// from addr.
func (th *throttle) failed(user, addr string, now time.Time) {
	th.mu.Lock()
	defer th.mu.Unlock()
	th.sweepLocked(now)
	record(th.addrs, addrKey(addr), now)
	if user != "" {
		record(th.users, strings.ToLower(user), now)
	}
}

// succeeded forgets the user's failures (not the address's).
func (th *throttle) succeeded(user string) {
	th.mu.Lock()
	defer th.mu.Unlock()
	delete(th.users, strings.ToLower(user))
}

// waitOf: the time until the oldest of a full window of failures leaves it.
func waitOf(fails []time.Time, now time.Time) time.Duration {
	if len(fails) < loginFailures {
		return 0
	}
	return max(fails[0].Add(loginWindow).Sub(now), 0)
}

func record(m map[string][]time.Time, key string, now time.Time) {
	fails, ok := m[key]
	if !ok && len(m) >= maxThrottled {
		return
	}
	fails = recent(fails, now)
	if len(fails) == loginFailures {
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
	for _, m := range []map[string][]time.Time{th.users, th.addrs} {
		for k, fails := range m {
			if len(recent(fails, now)) == 0 {
				delete(m, k)
			}
		}
	}
}
