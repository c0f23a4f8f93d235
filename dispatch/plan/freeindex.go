package plan

import "math/bits"

// freeIndex finds place's worker without scanning the fleet: the workers
// of a plan's free list in one bitset per number of free GPUs, and the free
// CPU slots in all. A plan examines every queued run it reads, and most of
// them, once the fleet is full, fit nowhere: a scan of 2,000 workers for
// each of them was most of a 100,000-run plan (bench scenario plan).
// Placement is unchanged: best fit, the first of the workers with the
// fewest free GPUs that fit (the lowest index of the lowest bucket).
type freeIndex struct {
	buckets [][]uint64 // buckets[k]: bit i set when free[i] has k free GPUs
	count   []int      // count[k]: workers in buckets[k]
	slots   int        // free CPU slots over all workers
	// shared lists the workers with a shared GPU (Worker.Shares), and
	// shareRoom is at least the most room left on one of them, in
	// hundredths: a fractional run that needs more, with no GPU free,
	// fits nowhere without a look (share.go).
	shared    []int
	isShared  []bool // by index into free: in shared
	shareRoom int
}

func newFreeIndex(free []Worker) *freeIndex {
	most := 0
	for _, w := range free {
		most = max(most, len(w.FreeGPUs))
	}
	words := (len(free) + 63) / 64
	x := &freeIndex{buckets: make([][]uint64, most+1), count: make([]int, most+1)}
	for k := range x.buckets {
		x.buckets[k] = make([]uint64, words)
	}
	for i, w := range free {
		x.add(i, len(w.FreeGPUs))
		x.slots += max(w.FreeSlots, 0)
		if len(w.Shares) > 0 {
			x.addShared(i)
			for _, s := range w.Shares {
				x.shareRoom = max(x.shareRoom, 100-s.Used)
			}
		}
	}
	return x
}

func (x *freeIndex) add(i, k int) {
	x.buckets[k][i/64] |= 1 << (i % 64)
	x.count[k]++
}

// moved records that free[i] went from `from` free GPUs to `to`.
func (x *freeIndex) moved(i, from, to int) {
	if from == to {
		return
	}
	x.buckets[from][i/64] &^= 1 << (i % 64)
	x.count[from]--
	x.add(i, to)
}

// took records a placement on free[i], which had n free GPUs: gpus of
// them, or a CPU slot when gpus is 0.
func (x *freeIndex) took(i, n, gpus int) {
	if gpus == 0 {
		x.slots--
		return
	}
	x.moved(i, n, n-gpus)
}

// bestFit returns the first worker with the fewest free GPUs, at least
// gpus (> 0) of them, for which ok holds (its cores and memory fit), or
// -1. When cores and memory do not bind, the first candidate is the
// answer; when they do, the candidates are tried in best-fit order.
func (x *freeIndex) bestFit(gpus int, ok func(i int) bool) int {
	for k := gpus; k < len(x.buckets); k++ {
		if x.count[k] == 0 {
			continue
		}
		for wi, word := range x.buckets[k] {
			for word != 0 {
				i := wi*64 + bits.TrailingZeros64(word)
				if ok(i) {
					return i
				}
				word &= word - 1
			}
		}
	}
	return -1
}

// anyGPUFree reports whether some worker has a free GPU.
func (x *freeIndex) anyGPUFree() bool {
	for k := 1; k < len(x.count); k++ {
		if x.count[k] > 0 {
			return true
		}
	}
	return false
}

// addShared records that free[i] has a shared GPU.
func (x *freeIndex) addShared(i int) {
	if x.isShared == nil {
		x.isShared = make([]bool, len(x.buckets[0])*64)
	}
	if !x.isShared[i] {
		x.isShared[i] = true
		x.shared = append(x.shared, i)
	}
}
