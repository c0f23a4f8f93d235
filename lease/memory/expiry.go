package memory

import (
	"container/heap"
	"time"
)

// timed is one entry of an expirySet: a key, its value and its deadline.
type timed[V any] struct {
	key     string
	val     V
	expires time.Time
	index   int // position in the heap; kept by Swap so Fix and Remove are O(log n)
}

// live reports whether the entry's deadline is still ahead of now. An entry
// is expired from its deadline on (expires <= now), the same rule everywhere.
func (e *timed[V]) live(now time.Time) bool { return now.Before(e.expires) }

// expirySet is a map whose entries carry a deadline, with a min-heap over the
// deadlines, so that finding the expired entries costs O(log n) each and
// never scans the live ones (a reaper runs every few seconds against
// thousands of live leases). Not safe for concurrent use: its owner holds
// the lock.
type expirySet[V any] struct {
	byKey map[string]*timed[V]
	order expiryHeap[V]
}

func newExpirySet[V any]() expirySet[V] {
	return expirySet[V]{byKey: make(map[string]*timed[V])}
}

func (s *expirySet[V]) get(key string) (*timed[V], bool) {
	e, ok := s.byKey[key]
	return e, ok
}

// put inserts key or replaces its value and deadline, keeping the heap in
// order (a renewal moves the entry down the heap).
func (s *expirySet[V]) put(key string, v V, expires time.Time) {
	if e, ok := s.byKey[key]; ok {
		e.val, e.expires = v, expires
		heap.Fix(&s.order, e.index)
		return
	}
	e := &timed[V]{key: key, val: v, expires: expires}
	s.byKey[key] = e
	heap.Push(&s.order, e)
}

// remove drops key; it reports whether key was there.
func (s *expirySet[V]) remove(key string) bool {
	e, ok := s.byKey[key]
	if !ok {
		return false
	}
	delete(s.byKey, key)
	heap.Remove(&s.order, e.index)
	return true
}

// popExpired removes and returns the entry with the earliest deadline if
// that deadline has passed by now.
func (s *expirySet[V]) popExpired(now time.Time) (*timed[V], bool) {
	if len(s.order) == 0 || s.order[0].live(now) {
		return nil, false
	}
	e := heap.Pop(&s.order).(*timed[V])
	delete(s.byKey, e.key)
	return e, true
}

func (s *expirySet[V]) len() int { return len(s.byKey) }

// expiryHeap implements heap.Interface ordered by deadline, earliest first.
type expiryHeap[V any] []*timed[V]

func (h expiryHeap[V]) Len() int           { return len(h) }
func (h expiryHeap[V]) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }

func (h expiryHeap[V]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *expiryHeap[V]) Push(x any) {
	e := x.(*timed[V])
	e.index = len(*h)
	*h = append(*h, e)
}

func (h *expiryHeap[V]) Pop() any {
	old := *h
	n := len(old) - 1
	e := old[n]
	old[n] = nil // let the entry be collected once the caller drops it
	e.index = -1
	*h = old[:n]
	return e
}
