package live

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

var hubBenchLine = []byte("episode 000123 reward=187.5 loss=0.0123 entropy=0.61 lr=0.0003 steps=4096 fps=10234 héllo wörld\n")

// A writer announcing lines nobody follows: the common case.
func BenchmarkHub_LogAppendedNoSubscribers(b *testing.B) {
	h := NewHub(HubConfig{LogDir: b.TempDir()})
	var n atomic.Int64
	b.ReportAllocs()
	b.SetBytes(int64(len(hubBenchLine)))
	b.RunParallel(func(pb *testing.PB) {
		id := "r" + strconv.FormatInt(n.Add(1), 10)
		var off int64
		for pb.Next() {
			h.LogAppended(id, off, hubBenchLine)
			off += int64(len(hubBenchLine))
		}
	})
}

// One run's lines to S live subscribers, each drained by its own writer
// goroutine, as /ws does.
func BenchmarkHub_LogFanOut(b *testing.B) {
	for _, subs := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) {
			h, live := newTestHub(b, HubConfig{})
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var frames atomic.Int64
			for i := 0; i < subs; i++ {
				s := h.NewSubscriber(testViewer)
				if err := s.Subscribe(LogTopic("r1"), SubscribeOptions{}); err != nil {
					b.Fatal(err)
				}
				waitLive(b, live, LogTopic("r1"))
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer s.Close()
					var buf [][]byte
					for {
						select {
						case <-s.Ready():
							buf = s.Drain(buf[:0])
							frames.Add(int64(len(buf)))
							clear(buf)
						case <-stop:
							frames.Add(int64(len(s.Drain(buf[:0]))))
							return
						}
					}
				}()
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(hubBenchLine)))
			b.ResetTimer()
			var off int64
			for i := 0; i < b.N; i++ {
				h.LogAppended("r1", off, hubBenchLine)
				off += int64(len(hubBenchLine))
			}
			close(stop)
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(h.Stats().Dropped)/float64(b.N*subs), "dropped/msg")
		})
	}
}
