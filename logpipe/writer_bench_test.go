package logpipe

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

type nopAcker struct{}

func (nopAcker) LogAcked(Ack) {}

// BenchmarkWriterParallel is the event loops' side of the writer: every
// RunParallel goroutine streams 120-byte-line frames of runs of its own
// (in order, retrying when refused), as several event loops do, with each
// queue the writer can have. The writer is drained (Close) before the
// clock stops.
func BenchmarkWriterParallel(b *testing.B) {
	for _, q := range []string{"ring", "chan"} {
		b.Run(q, func(b *testing.B) {
			w, err := NewWriter(WriterConfig{Dir: b.TempDir(), Queue: q, Writers: 2})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			frame := bytes.Repeat([]byte(strings.Repeat("x", 119)+"\n"), 8) // 8 lines
			var next atomic.Int64
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				const runs = 8
				p := next.Add(1)
				var ids [runs]string
				var offs [runs]uint64
				for i := range ids {
					ids[i] = fmt.Sprintf("p%d-r%d", p, i)
				}
				i := 0
				for pb.Next() {
					r := i % runs
					f := Frame{TaskID: ids[r], TraceID: "t", Attempt: 1, Offset: offs[r], Data: frame, Ack: nopAcker{}}
					for !w.Submit(f) {
						runtime.Gosched() // busy: as a worker would, come back later
					}
					offs[r] += uint64(len(frame))
					i++
				}
			})
			w.Close()
			b.StopTimer()
			if st := w.Stats(); st["gaps"] != int64(0) {
				b.Fatalf("gaps: %v", st)
			}
		})
	}
}
