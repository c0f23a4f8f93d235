package sim

import (
	"testing"
	"time"
)

// BenchmarkRunYear simulates a year of synthetic jobs (the Helios Venus
// cluster's size: 125 workers × 8 GPUs) under rlsched's policy; b.N
// counts simulations, jobs/s and events/s are reported.
func BenchmarkRunYear(b *testing.B) {
	for _, jobs := range []int{100_000, 1_000_000} {
		b.Run(human(jobs), func(b *testing.B) {
			s := Synthetic{Jobs: jobs, Users: 200, Span: 365 * 24 * time.Hour, Median: 30 * time.Minute,
				High: 0.05, Preemptible: 0.5, Seed: 1}
			tr := s.Trace()
			c := &Cluster{Workers: []WorkerSpec{{ID: "node", Count: 125, GPUs: 8, Slots: 8}}}
			b.ReportAllocs()
			var events, passes int64
			for b.Loop() {
				r, err := Run(c, tr, Config{CheckpointEvery: 30 * time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				events, passes = r.Events, r.Passes
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(jobs)/sec, "jobs/s")
			b.ReportMetric(float64(events)/sec, "events/s")
			b.ReportMetric(float64(passes)/sec, "passes/s")
		})
	}
}

func human(n int) string {
	if n >= 1_000_000 {
		return itoa(n/1_000_000) + "M"
	}
	return itoa(n/1000) + "k"
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
