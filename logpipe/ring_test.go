package logpipe

import (
	"runtime"
	"slices"
	"sync"
	"testing"
)

func TestRing_SizeRoundsUpToPowerOfTwo(t *testing.T) {
	f := func(size, want int) {
		t.Helper()
		if got := NewRing[int](size).Cap(); got != want {
			t.Fatalf("NewRing(%d).Cap() = %d, want %d", size, got, want)
		}
	}
	f(0, 2)
	f(1, 2)
	f(2, 2)
	f(5, 8)
	f(4096, 4096)
	f(4097, 8192)
}

func TestRing_FIFOAndFullAcrossLaps(t *testing.T) {
	r := NewRing[int](8)
	next, want := 0, 0
	for lap := 0; lap < 5; lap++ {
		for r.TryPush(next) {
			next++
		}
		if r.Len() != r.Cap() {
			t.Fatalf("lap %d: full ring has Len %d, want %d", lap, r.Len(), r.Cap())
		}
		if r.TryPush(-1) {
			t.Fatalf("lap %d: push into a full ring accepted", lap)
		}
		// Pop part of it, so laps start at different cells.
		for i := 0; i < 3+lap%4; i++ {
			v, ok := r.TryPop()
			if !ok || v != want {
				t.Fatalf("lap %d: TryPop = %d,%v want %d", lap, v, ok, want)
			}
			want++
		}
	}
	for {
		v, ok := r.TryPop()
		if !ok {
			break
		}
		if v != want {
			t.Fatalf("drain: got %d want %d", v, want)
		}
		want++
	}
	if want != next || r.Len() != 0 {
		t.Fatalf("popped up to %d, pushed %d, Len %d", want, next, r.Len())
	}
	if _, ok := r.TryPop(); ok {
		t.Fatal("pop from an empty ring succeeded")
	}
}

// ringItem carries a payload written by the producer and checked by the
// consumer: under -race, a missing happens-before edge between them fails.
type ringItem struct {
	producer, seq int
	payload       []byte
}

func TestRing_ManyProducersExactDelivery(t *testing.T) {
	// batch 0: consumers pop one at a time (TryPop), else up to batch at a
	// time (TryPopBatch).
	f := func(producers, consumers, perProducer, size, batch int) {
		t.Helper()
		r := NewRing[ringItem](size)
		var wg sync.WaitGroup
		for p := 0; p < producers; p++ {
			wg.Go(func() {
				for i := 0; i < perProducer; i++ {
					it := ringItem{producer: p, seq: i, payload: []byte{byte(p), byte(i), byte(i >> 8)}}
					for !r.TryPush(it) {
						runtime.Gosched() // full: the consumers make room
					}
				}
			})
		}
		total := producers * perProducer
		got := make([][]int, consumers) // per consumer, the items in pop order, encoded
		var popped sync.WaitGroup
		var mu sync.Mutex
		count := 0
		for c := 0; c < consumers; c++ {
			popped.Go(func() {
				var buf []ringItem
				for {
					mu.Lock()
					done := count >= total
					mu.Unlock()
					if done {
						return
					}
					buf = buf[:0]
					if batch == 0 {
						if it, ok := r.TryPop(); ok {
							buf = append(buf, it)
						}
					} else {
						buf = r.TryPopBatch(buf, batch)
						if len(buf) > batch {
							t.Errorf("TryPopBatch gave %d items, max %d", len(buf), batch)
						}
					}
					if len(buf) == 0 {
						runtime.Gosched()
						continue
					}
					for _, it := range buf {
						if it.payload[0] != byte(it.producer) || it.payload[1] != byte(it.seq) || it.payload[2] != byte(it.seq>>8) {
							t.Errorf("payload of %d/%d is %v", it.producer, it.seq, it.payload)
						}
						got[c] = append(got[c], it.producer*perProducer+it.seq)
					}
					mu.Lock()
					count += len(buf)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		popped.Wait()
		seen := make([]bool, total)
		for c, items := range got {
			last := make([]int, producers)
			for i := range last {
				last[i] = -1
			}
			for _, v := range items {
				if seen[v] {
					t.Fatalf("item %d delivered twice", v)
				}
				seen[v] = true
				// One consumer sees each producer's items in push order.
				p, seq := v/perProducer, v%perProducer
				if seq <= last[p] {
					t.Fatalf("consumer %d: producer %d's item %d after %d", c, p, seq, last[p])
				}
				last[p] = seq
			}
		}
		for v, ok := range seen {
			if !ok {
				t.Fatalf("item %d never delivered", v)
			}
		}
		if r.Len() != 0 {
			t.Fatalf("Len %d after draining", r.Len())
		}
	}
	f(8, 1, 5000, 64, 0)   // MPSC, often full
	f(8, 1, 2000, 4096, 0) // MPSC, rarely full
	f(4, 4, 3000, 16, 0)   // MPMC, tiny ring
	f(1, 1, 10000, 2, 0)   // the smallest ring
	f(8, 1, 5000, 64, 64)  // MPSC in batches, as the writers use it
	f(8, 1, 2000, 4096, 7) // batches smaller than what is there
	f(4, 4, 3000, 16, 5)   // MPMC in batches, tiny ring
	f(1, 1, 10000, 2, 3)   // the smallest ring, batches larger than it
}

// TryPopBatch takes what is ready, in order, at most max, across the
// ring's wrap, and nothing from an empty ring.
func TestRing_PopBatch(t *testing.T) {
	r := NewRing[int](8)
	if got := r.TryPopBatch(nil, 4); len(got) != 0 || r.Ready() {
		t.Fatalf("batch from an empty ring: %v, ready %v", got, r.Ready())
	}
	next := 0
	for lap := 0; lap < 5; lap++ {
		for range 6 {
			if !r.TryPush(next) {
				t.Fatalf("push %d refused", next)
			}
			next++
		}
		if !r.Ready() {
			t.Fatalf("lap %d: not ready with 6 pushed", lap)
		}
		got := r.TryPopBatch(nil, 4)
		got = r.TryPopBatch(got, 4)
		want := []int{next - 6, next - 5, next - 4, next - 3, next - 2, next - 1}
		if !slices.Equal(got, want) {
			t.Fatalf("lap %d: %v want %v", lap, got, want)
		}
		if r.Len() != 0 || r.Ready() {
			t.Fatalf("lap %d: Len %d, ready %v after taking all", lap, r.Len(), r.Ready())
		}
	}
}

func TestRing_FullRefusesConcurrentPushes(t *testing.T) {
	r := NewRing[int](16)
	for i := 0; i < r.Cap(); i++ {
		if !r.TryPush(i) {
			t.Fatalf("push %d into a ring of %d refused", i, r.Cap())
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := 0
	for p := 0; p < 8; p++ {
		wg.Go(func() {
			for i := 0; i < 1000; i++ {
				if r.TryPush(100) {
					mu.Lock()
					accepted++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if accepted != 0 {
		t.Fatalf("a full ring accepted %d pushes", accepted)
	}
	// One pop makes room for exactly one push.
	if v, ok := r.TryPop(); !ok || v != 0 {
		t.Fatalf("TryPop = %d,%v", v, ok)
	}
	wins := 0
	for p := 0; p < 8; p++ {
		wg.Go(func() {
			if r.TryPush(7) {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d pushes took the one free cell", wins)
	}
}
