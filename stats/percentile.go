package stats

import (
	"math"
	"slices"
)

// percentile is numpy.percentile(xs, 100*q) (linear interpolation between
// the order statistics around (n-1)·q). It reorders xs; xs is not empty.
// heap is scratch, reused between calls.
func percentile(xs []float64, q float64, heap *[]float64) float64 {
	n := len(xs)
	h := float64(n-1) * q
	i := int(math.Floor(h))
	var lo, hi float64
	switch {
	case i+2 <= n/8:
		// An interval's end is in a tail: the i+2 smallest in a heap, one
		// pass over xs, not a selection of all of them.
		hi, lo = tail(xs, i+2, 1, heap)
	case n-i >= 2 && n-i <= n/8:
		a, b := tail(xs, n-i, -1, heap)
		lo, hi = -a, -b
	default:
		lo = selectK(xs, i)
		hi = lo
		if i+1 < n {
			hi = xs[i+1]
			for _, x := range xs[i+2:] { // selectK left everything above i at or above lo
				hi = min(hi, x)
			}
		}
	}
	if i+1 >= n || h == float64(i) {
		return lo
	}
	return lerp(lo, hi, h-float64(i))
}

// tail is, of sign·x for x in xs, the m-th and (m-1)-th smallest (m ≥ 2,
// m ≤ len(xs)): a max-heap of the m smallest seen so far, in heap.
func tail(xs []float64, m int, sign float64, heap *[]float64) (mth, prev float64) {
	hp := (*heap)[:0]
	for _, x := range xs[:m] {
		hp = append(hp, sign*x)
		for c := len(hp) - 1; c > 0; { // sift up
			p := (c - 1) / 2
			if hp[p] >= hp[c] {
				break
			}
			hp[p], hp[c] = hp[c], hp[p]
			c = p
		}
	}
	for _, x := range xs[m:] {
		if x *= sign; x >= hp[0] {
			continue
		}
		hp[0] = x
		for p := 0; ; { // sift down
			c := 2*p + 1
			if c >= m {
				break
			}
			if c+1 < m && hp[c+1] > hp[c] {
				c++
			}
			if hp[p] >= hp[c] {
				break
			}
			hp[p], hp[c] = hp[c], hp[p]
			p = c
		}
	}
	*heap = hp
	// The root is the m-th smallest; the largest of its children the one
	// before it.
	prev = hp[1]
	if m > 2 {
		prev = max(prev, hp[2])
	}
	return hp[0], prev
}

func lerp(a, b, t float64) float64 { return a + t*(b-a) }

// selectK reorders xs so that xs[k] is the k-th smallest, those before it
// no greater and those after it no smaller, and returns it: quickselect with
// a median-of-three pivot and a three-way partition (so ties, which a
// bootstrap of few runs is full of, cost nothing).
func selectK(xs []float64, k int) float64 {
	lo, hi := 0, len(xs)-1
	for hi > lo {
		if hi-lo < 16 {
			insertion(xs[lo : hi+1])
			break
		}
		a, b, c := xs[lo], xs[(lo+hi)/2], xs[hi]
		p := max(min(a, b), min(max(a, b), c))
		// xs[lo:lt] < p, xs[lt:i] == p, xs[gt+1:hi+1] > p.
		lt, i, gt := lo, lo, hi
		for i <= gt {
			switch x := xs[i]; {
			case x < p:
				xs[lt], xs[i] = x, xs[lt]
				lt++
				i++
			case x > p:
				xs[gt], xs[i] = x, xs[gt]
				gt--
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt - 1
		case k > gt:
			lo = gt + 1
		default:
			return p
		}
	}
	return xs[k]
}

func insertion(xs []float64) {
	for i := 1; i < len(xs); i++ {
		x := xs[i]
		j := i
		for ; j > 0 && xs[j-1] > x; j-- {
			xs[j] = xs[j-1]
		}
		xs[j] = x
	}
}

// histPercentile is percentile over values k/n (k = 0..n) that occur
// hist[k] times.
func histPercentile(hist []int32, n int, q float64) float64 {
	total := 0
	for _, c := range hist {
		total += int(c)
	}
	h := float64(total-1) * q
	i := int(math.Floor(h))
	at := func(i int) float64 { // the i-th smallest value
		for k, c := range hist {
			if i < int(c) {
				return float64(k) / float64(n)
			}
			i -= int(c)
		}
		return 1
	}
	lo := at(i)
	if h == float64(i) {
		return lo
	}
	return lerp(lo, at(i+1), h-float64(i))
}

// interval is [percentile(xs, qlo), percentile(xs, qhi)] for qlo < qhi. When
// both ends are in the tails (as a 95% interval's are), one pass over xs
// keeps the values beyond two thresholds read off a small sample, and the
// order statistics are selected among those few; otherwise, or when the
// sample misjudged a tail, percentile finds each end. xs is reordered;
// scratch is reused between calls.
func interval(xs []float64, qlo, qhi float64, scratch *[]float64) (float64, float64) {
	n := len(xs)
	hlo, hhi := float64(n-1)*qlo, float64(n-1)*qhi
	ilo, ihi := int(math.Floor(hlo)), int(math.Floor(hhi))
	// Each tail needs its two order statistics around the end: ilo+2
	// values from below, n-ihi from above.
	mlo, mhi := ilo+2, n-ihi
	const sample = 64
	if n < 8*sample || mlo > n/16 || mhi > n/16 || mhi < 2 {
		return percentile(xs, qlo, scratch), percentile(xs, qhi, scratch)
	}
	// The thresholds: a sample value that about 4 times the needed share
	// of xs lies beyond (and the needed share with all but a tiny chance).
	r := func(m int) int { return min(sample-1, 4*m*sample/n+3) }
	var smp [sample]float64
	for j := range smp {
		smp[j] = xs[j*n/sample]
	}
	insertion(smp[:])
	tlo, thi := smp[r(mlo)], smp[sample-1-r(mhi)]
	buf := slices.Grow((*scratch)[:0], 2*n)[:2*n]
	low, high := buf[:n], buf[n:]
	nl, nh := 0, 0
	for _, x := range xs {
		low[nl], high[nh] = x, x
		nl += b2i(x <= tlo)
		nh += b2i(x >= thi)
	}
	*scratch = buf
	if nl < mlo || nh < mhi {
		return percentile(xs, qlo, scratch), percentile(xs, qhi, scratch)
	}
	// Below tlo are the nl smallest: the order statistics are theirs.
	lo := lerpAt(low[:nl], ilo, hlo)
	// Above thi are the nh largest: x_(ihi) is the (ihi-(n-nh))-th of them.
	off := n - nh
	hi := lerpAt(high[:nh], ihi-off, hhi-float64(off))
	return lo, hi
}

// lerpAt is percentile's interpolation at position h of xs's sorted order,
// i = floor(h); xs is reordered.
func lerpAt(xs []float64, i int, h float64) float64 {
	a := selectK(xs, i)
	if i+1 >= len(xs) || h == float64(i) {
		return a
	}
	b := xs[i+1]
	for _, x := range xs[i+2:] {
		b = min(b, x)
	}
	return lerp(a, b, h-float64(i))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
