package fleet

import (
	"container/heap"
	"sync"
	"time"
)

// Bits of worker.due: what the timer asks the event loop to do.
const (
	dueHeartbeat uint32 = 1 << iota
	dueFinish
)

// timers is one goroutine over a min-heap of deadlines. At a deadline it
// sets a bit in the worker's due mask and wakes its connection, so the work
// itself happens on the connection's event loop.
type timers struct {
	mu   sync.Mutex
	h    timerHeap
	done chan struct{}
	once sync.Once
}

type timer struct {
	at       int64 // unix nanos
	w        *worker
	gen      uint32
	bit      uint32
	interval time.Duration // > 0: rearm after firing (heartbeats)
}

type timerHeap []timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

func (t *timers) init() { t.done = make(chan struct{}) }

// add schedules bit for w's connection generation gen at at. Safe from any goroutine.
func (t *timers) add(at int64, w *worker, gen, bit uint32, interval time.Duration) {
	t.mu.Lock()
	heap.Push(&t.h, timer{at: at, w: w, gen: gen, bit: bit, interval: interval})
	t.mu.Unlock()
}

func (t *timers) stop() { t.once.Do(func() { close(t.done) }) }

func (t *timers) run(f *Fleet) {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-t.done:
			return
		case <-tick.C:
		}
		now := time.Now().UnixNano()
		t.mu.Lock()
		for len(t.h) > 0 && t.h[0].at <= now {
			tm := heap.Pop(&t.h).(timer)
			if tm.w.gen.Load() != tm.gen {
				continue // the connection it belonged to is gone
			}
			f.mu.Lock()
			c := f.conns[tm.w.idx]
			f.mu.Unlock()
			if c == nil {
				continue
			}
			tm.w.due.Or(tm.bit)
			_ = c.Wake(nil)
			if tm.interval > 0 {
				tm.at += int64(tm.interval)
				if tm.at <= now {
					tm.at = now + int64(tm.interval)
				}
				heap.Push(&t.h, tm)
			}
		}
		t.mu.Unlock()
	}
}
