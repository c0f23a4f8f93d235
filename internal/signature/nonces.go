package signature

import (
	"errors"
	"hash/maphash"
	"sync"
	"time"
)

// Errors of Nonces.Check.
var (
	// ErrReplayed: this nonce was seen with this timestamp before.
	ErrReplayed = errors.New("the gateway's nonce was used before: a replayed request")
	// ErrTooOld: the timestamp is below the floor the bounded cache no longer
	// remembers, or outside the skew window.
	ErrTooOld = errors.New("the gateway's signature is too old to be checked for replay")
)

// DefaultMaxNonces bounds a Nonces: about 20 MiB, and at 10,000 signed
// requests a second the floor stays about 100 s behind the clock.
const DefaultMaxNonces = 1 << 20

// Nonces remembers the nonces of the signatures a master accepted, each as
// long as its timestamp is inside the skew window, so a captured request
// cannot be sent again. Its memory is bounded: when it holds max nonces, the
// oldest second of them is forgotten and the floor rises past it, so that a
// timestamp of a forgotten second is refused (ErrTooOld) rather than
// admitted twice. A nonce is kept as a 64-bit seeded hash: a collision
// refuses a genuine request (one in about 10^13 with a million remembered),
// it never admits a replay. Safe to call from any goroutine.
type Nonces struct {
	skewMs int64
	max    int

	mu      sync.Mutex
	seed    maphash.Seed
	buckets map[int64]map[uint64]struct{} // by second of the signed timestamp
	n       int
	floor   int64 // seconds: timestamps of earlier seconds are refused
	swept   int64 // second of the last expiry sweep
}

// NewNonces returns a cache for signatures within maxSkew of the clock,
// holding at most max nonces (DefaultMaxNonces when max ≤ 0).
func NewNonces(maxSkew time.Duration, max int) *Nonces {
	if max <= 0 {
		max = DefaultMaxNonces
	}
	return &Nonces{skewMs: maxSkew.Milliseconds(), max: max, seed: maphash.MakeSeed(),
		buckets: map[int64]map[uint64]struct{}{}}
}

// Check records nonce of a signature made at tsMs (Unix milliseconds) and
// returns nil when it is new, ErrReplayed when it was recorded before and
// ErrTooOld when it cannot be told (outside the window, or below the floor).
func (c *Nonces) Check(nonce string, tsMs int64, now time.Time) error {
	nowMs := now.UnixMilli()
	if tsMs < nowMs-c.skewMs || tsMs > nowMs+c.skewMs {
		return ErrTooOld
	}
	sec := tsMs / 1000
	key := maphash.String(c.seed, nonce)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireLocked(nowMs)
	if sec < c.floor {
		return ErrTooOld
	}
	b := c.buckets[sec]
	if b == nil {
		b = map[uint64]struct{}{}
		c.buckets[sec] = b
	}
	if _, seen := b[key]; seen {
		return ErrReplayed
	}
	b[key] = struct{}{}
	c.n++
	for c.n > c.max {
		c.dropOldestLocked()
		if c.buckets[sec] == nil { // this very second went: refuse, do not admit unrecorded
			return ErrTooOld
		}
	}
	return nil
}

// expireLocked forgets the seconds wholly outside the window, at most once a
// second.
func (c *Nonces) expireLocked(nowMs int64) {
	nowSec := nowMs / 1000
	if nowSec == c.swept {
		return
	}
	c.swept = nowSec
	oldest := (nowMs - c.skewMs) / 1000 // seconds before it hold no valid timestamp
	for sec, b := range c.buckets {
		if sec < oldest {
			c.n -= len(b)
			delete(c.buckets, sec)
		}
	}
}

// dropOldestLocked forgets the oldest second and raises the floor past it.
func (c *Nonces) dropOldestLocked() {
	first := true
	var oldest int64
	for sec := range c.buckets { // at most 2×skew+1 seconds
		if first || sec < oldest {
			oldest, first = sec, false
		}
	}
	if first {
		return
	}
	c.n -= len(c.buckets[oldest])
	delete(c.buckets, oldest)
	c.floor = max(c.floor, oldest+1)
}

// Len returns how many nonces are remembered.
func (c *Nonces) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
