package main

import "testing"

// BenchmarkMasterHeartbeat measures the master's cost per heartbeat in this
// process, over loopback (go test ./bench -run '^$' -bench MasterHeartbeat).
// allocs/op and B/op are the master's: the client allocates nothing per
// heartbeat.
func BenchmarkMasterHeartbeat(b *testing.B) {
	for _, withRun := range []bool{false, true} {
		name := "idle"
		if withRun {
			name = "one-run"
		}
		b.Run(name, func(b *testing.B) {
			p, err := newHBProbe(b.TempDir(), withRun)
			if err != nil {
				b.Fatal(err)
			}
			defer p.close()
			if _, err := p.beat(1000); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(p.frame)))
			b.ResetTimer()
			if _, err := p.beat(b.N); err != nil {
				b.Fatal(err)
			}
		})
	}
}

func TestHeartbeatAllocsRuns(t *testing.T) {
	a, by, err := heartbeatAllocs(t.TempDir(), true, 5000)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.1f allocs, %.0f B per heartbeat", a, by)
	if a <= 0 {
		t.Fatal("no allocation counted: the probe is not reaching the master")
	}
}
