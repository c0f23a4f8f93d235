package hist

import (
	"math/rand/v2"
	"sort"
	"testing"
)

func TestIndexLowerAgree(t *testing.T) {
	f := func(v uint64) {
		t.Helper()
		i := index(v)
		if lo, hi := lower(i), lower(i+1); v < lo || (i+1 < nBucket && v >= hi) {
			t.Fatalf("value %d in bucket %d [%d, %d)", v, i, lo, hi)
		}
	}
	for v := uint64(0); v < 5000; v++ {
		f(v)
	}
	for range 100000 {
		f(rand.Uint64() >> uint(rand.IntN(63)))
	}
	f(1<<63 - 1)
}

func TestQuantileWithinPrecision(t *testing.T) {
	var h Hist
	vals := make([]int64, 10000)
	for i := range vals {
		vals[i] = rand.Int64N(50_000_000)
		h.Add(vals[i])
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := float64(vals[int(q*float64(len(vals)))-1])
		got := float64(h.Quantile(q))
		if got < want*0.95 || got > want*1.05 {
			t.Fatalf("q%.2f: got %.0f, want about %.0f", q, got, want)
		}
	}
	var m Hist
	m.Merge(h.Snapshot())
	if m.Quantile(0.99) != h.Quantile(0.99) || m.Count() != h.Count() {
		t.Fatal("merge changed the histogram")
	}
}
