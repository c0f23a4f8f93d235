// Package hist is a fixed-size latency histogram with about 3% relative
// precision (32 sub-buckets per power of two), safe for concurrent Add, and
// mergeable across processes through its sparse JSON form.
package hist

import (
	"math/bits"
	"sync/atomic"
	"time"
)

const (
	subBits = 5
	sub     = 1 << subBits // sub-buckets per power of two
	nBucket = (64 - subBits + 1) * sub
)

// Hist counts values (nanoseconds by convention). The zero value is ready.
// Add is safe for concurrent use; the other methods are not, except Snapshot.
type Hist struct {
	counts [nBucket]atomic.Uint64
}

func index(v uint64) int {
	if v < 2*sub {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return (shift+1)*sub + int(v>>uint(shift)) - sub
}

// lower returns the smallest value of bucket i.
func lower(i int) uint64 {
	if i < 2*sub {
		return uint64(i)
	}
	shift := i/sub - 1
	return uint64(sub+i%sub) << uint(shift)
}

// Add records one value; negative values count as 0.
func (h *Hist) Add(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[index(uint64(v))].Add(1)
}

// AddDuration records d.
func (h *Hist) AddDuration(d time.Duration) { h.Add(int64(d)) }

// Sparse is the JSON form: bucket index → count, non-zero buckets only.
type Sparse map[int]uint64

// Snapshot copies the counts.
func (h *Hist) Snapshot() Sparse {
	s := Sparse{}
	for i := range h.counts {
		if n := h.counts[i].Load(); n > 0 {
			s[i] = n
		}
	}
	return s
}

// Reset zeroes every bucket.
func (h *Hist) Reset() {
	for i := range h.counts {
		h.counts[i].Store(0)
	}
}

// Merge adds s into h.
func (h *Hist) Merge(s Sparse) {
	for i, n := range s {
		if i >= 0 && i < nBucket {
			h.counts[i].Add(n)
		}
	}
}

// Count returns the number of values recorded.
func (h *Hist) Count() uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

// Quantile returns the value below which a fraction q of values fall (the
// lower bound of the bucket holding it, plus half its width), 0 when empty.
func (h *Hist) Quantile(q float64) int64 {
	total := h.Count()
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total) + 0.5)
	if rank < 1 {
		rank = 1
	}
	if rank > total {
		rank = total
	}
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			lo := lower(i)
			hi := lower(i + 1)
			return int64(lo + (hi-lo)/2)
		}
	}
	return int64(lower(nBucket - 1))
}

// QuantileDuration is Quantile as a time.Duration.
func (h *Hist) QuantileDuration(q float64) time.Duration { return time.Duration(h.Quantile(q)) }
