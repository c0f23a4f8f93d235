package logpipe

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// The ring against the alternatives for moving log frames from many event
// loops to one writer: a mutex-guarded slice drained by swapping (the
// dispatch shard's way), padded mutex shards drained in turn (VictoriaMetrics
// lib/storage/raw_row.go's way), and a buffered channel. Each moves b.N
// frame-sized items of 120-byte lines from RunParallel producers to one
// consumer goroutine, and stops the clock once the consumer has all of them.
// The ring and the mutexes spin (Gosched) when full or empty; the channel
// blocks, its natural mode.

const benchQueueSize = 4096

var benchLine = make([]byte, 120)

type benchQueue interface {
	push(frameItem) bool
	// drain pops what is there, calls f for each, and returns how many.
	drain(f func(frameItem)) int
}

type ringQueue struct{ r *Ring[frameItem] }

func (q ringQueue) push(it frameItem) bool { return q.r.TryPush(it) }
func (q ringQueue) drain(f func(frameItem)) int {
	n := 0
	for {
		it, ok := q.r.TryPop()
		if !ok {
			return n
		}
		f(it)
		n++
	}
}

// ringBatchQueue drains as the writer does: popChunk items per CAS.
type ringBatchQueue struct {
	r   *Ring[frameItem]
	buf []frameItem
}

func (q *ringBatchQueue) push(it frameItem) bool { return q.r.TryPush(it) }
func (q *ringBatchQueue) drain(f func(frameItem)) int {
	n := 0
	for {
		q.buf = q.r.TryPopBatch(q.buf[:0], popChunk)
		if len(q.buf) == 0 {
			return n
		}
		for i := range q.buf {
			f(q.buf[i])
			q.buf[i] = frameItem{}
		}
		n += len(q.buf)
	}
}

type mutexQueue struct {
	mu    sync.Mutex
	items []frameItem
	spare []frameItem
	limit int
}

func (q *mutexQueue) push(it frameItem) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) >= q.limit {
		return false
	}
	q.items = append(q.items, it)
	return true
}

func (q *mutexQueue) drain(f func(frameItem)) int {
	q.mu.Lock()
	batch := q.items
	q.items, q.spare = q.spare[:0], nil
	q.mu.Unlock()
	for i := range batch {
		f(batch[i])
		batch[i] = frameItem{}
	}
	q.mu.Lock()
	q.spare = batch[:0]
	q.mu.Unlock()
	return len(batch)
}

// shardedQueue is mutex shards padded to their own cache lines; producers
// pick a shard each, the consumer drains them in turn.
type shardedQueue struct {
	shards []paddedShard
	next   atomic.Uint32
}

type paddedShard struct {
	mutexQueue
	_ [cacheLine]byte
}

func newShardedQueue(n, limit int) *shardedQueue {
	q := &shardedQueue{shards: make([]paddedShard, n)}
	for i := range q.shards {
		q.shards[i].limit = limit / n
	}
	return q
}

func (q *shardedQueue) drain(f func(frameItem)) int {
	n := 0
	for i := range q.shards {
		n += q.shards[i].drain(f)
	}
	return n
}

type chanQueue struct{ c chan frameItem }

func benchmarkQueue(b *testing.B, push func(frameItem), drain func(f func(frameItem)) int, blockingDrain bool) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchLine)))
	var got atomic.Int64
	done := make(chan struct{})
	target := int64(b.N)
	go func() {
		defer close(done)
		var sum int
		count := func(it frameItem) { sum += len(it.Data) }
		for got.Load() < target {
			n := drain(count)
			got.Add(int64(n))
			if n == 0 && !blockingDrain {
				runtime.Gosched()
			}
		}
		_ = sum
	}()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		it := frameItem{Frame: Frame{TaskID: "run", Attempt: 1, Data: benchLine}}
		for pb.Next() {
			push(it)
		}
	})
	<-done // the consumer has every item: drained before the clock stops
	b.StopTimer()
}

func spinPush(q benchQueue) func(frameItem) {
	return func(it frameItem) {
		for !q.push(it) {
			runtime.Gosched()
		}
	}
}

func BenchmarkQueue(b *testing.B) {
	b.Run("ring", func(b *testing.B) {
		q := ringQueue{NewRing[frameItem](benchQueueSize)}
		benchmarkQueue(b, spinPush(q), q.drain, false)
	})
	b.Run("ring-batch", func(b *testing.B) {
		q := &ringBatchQueue{r: NewRing[frameItem](benchQueueSize)}
		benchmarkQueue(b, spinPush(q), q.drain, false)
	})
	b.Run("mutex-slice", func(b *testing.B) {
		q := &mutexQueue{limit: benchQueueSize}
		benchmarkQueue(b, spinPush(q), q.drain, false)
	})
	b.Run("mutex-shards", func(b *testing.B) {
		q := newShardedQueue(runtime.GOMAXPROCS(0)*2, benchQueueSize)
		var ids atomic.Uint32
		b.ReportAllocs()
		b.SetBytes(int64(len(benchLine)))
		var got atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			for got.Load() < int64(b.N) {
				n := q.drain(func(frameItem) {})
				got.Add(int64(n))
				if n == 0 {
					runtime.Gosched()
				}
			}
		}()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			s := &q.shards[int(ids.Add(1))%len(q.shards)]
			it := frameItem{Frame: Frame{TaskID: "run", Attempt: 1, Data: benchLine}}
			for pb.Next() {
				for !s.push(it) {
					runtime.Gosched()
				}
			}
		})
		<-done
		b.StopTimer()
	})
	b.Run("channel", func(b *testing.B) {
		q := chanQueue{make(chan frameItem, benchQueueSize)}
		drain := func(f func(frameItem)) int {
			f(<-q.c) // blocks while empty
			n := 1
			for {
				select {
				case it := <-q.c:
					f(it)
					n++
				default:
					return n
				}
			}
		}
		benchmarkQueue(b, func(it frameItem) { q.c <- it }, drain, true)
	})
}

// BenchmarkQueueSubmit measures what an event loop pays per frame when the
// writer is behind: producers never wait (a refused push counts, as Submit
// answers "busy"), one consumer drains as fast as it can; producers at full
// speed outrun it, so most pushes are refused (refused/op). No SetBytes:
// the bytes moved are a small share of the operations.
func BenchmarkQueueSubmit(b *testing.B) {
	run := func(b *testing.B, push func(frameItem) bool, drain func(f func(frameItem)) int) {
		b.ReportAllocs()
		var refused atomic.Int64
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				if drain(func(frameItem) {}) == 0 {
					select {
					case <-stop:
						return
					default:
						runtime.Gosched()
					}
				}
			}
		}()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			it := frameItem{Frame: Frame{TaskID: "run", Attempt: 1, Data: benchLine}}
			n := int64(0)
			for pb.Next() {
				if !push(it) {
					n++
				}
			}
			refused.Add(n)
		})
		b.StopTimer()
		close(stop)
		<-done
		b.ReportMetric(float64(refused.Load())/float64(b.N), "refused/op")
	}
	b.Run("ring", func(b *testing.B) {
		q := ringQueue{NewRing[frameItem](benchQueueSize)}
		run(b, q.push, q.drain)
	})
	b.Run("ring-batch", func(b *testing.B) {
		q := &ringBatchQueue{r: NewRing[frameItem](benchQueueSize)}
		run(b, q.push, q.drain)
	})
	b.Run("mutex-slice", func(b *testing.B) {
		q := &mutexQueue{limit: benchQueueSize}
		run(b, q.push, q.drain)
	})
	b.Run("channel", func(b *testing.B) {
		c := make(chan frameItem, benchQueueSize)
		push := func(it frameItem) bool {
			select {
			case c <- it:
				return true
			default:
				return false
			}
		}
		drain := func(f func(frameItem)) int {
			n := 0
			for {
				select {
				case it := <-c:
					f(it)
					n++
				default:
					return n
				}
			}
		}
		run(b, push, drain)
	})
}
