package main

import "testing"

// BenchmarkMasterHeartbeat measures the master's cost per heartbeat in this
// process, over loopback (go test ./bench -run '^$' -bench MasterHeartbeat).
// allocs/op and B/op are the master's: the client allocates nothing per
// heartbeat.
func BenchmarkMasterHeartbeat(b *testing.B) {
	for _, c := range []struct {
		name    string
		withRun bool
		gpus    int
	}{{"idle", false, 0}, {"one-run", true, 0}, {"8-gpus", false, 8}, {"8-gpus-sampled", false, -8}} {
		b.Run(c.name, func(b *testing.B) {
			// gpus < 0: that many GPUs, and a sample in every heartbeat.
			p, err := newHBProbe(b.TempDir(), c.withRun, c.gpus)
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
