package cgroup

import (
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// BenchmarkStart measures what a run's group adds to its start and end
// (issue 26: at most 5 ms): /bin/true started and reaped plainly, and
// inside a group made, started into, killed, read and removed, with a
// memory and CPU limit and the device wall of 8 GPUs.
func BenchmarkStart(b *testing.B) {
	run := func(b *testing.B, g *Group) {
		cmd := exec.Command("/bin/true")
		if err := g.Start(cmd); err != nil {
			b.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			run(b, nil)
		}
	})
	// A quota of half a core shares the cores; a whole one takes a core
	// alone, so its start and end rewrite the others' cpusets and the
	// worker's own (reshare).
	for _, c := range []struct {
		name   string
		millis int64
	}{{"cgroup", 500}, {"cgroup-whole-core", 1000}} {
		b.Run(c.name, func(b *testing.B) { benchGroup(b, run, c.millis) })
	}
}

func benchGroup(b *testing.B, run func(*testing.B, *Group), millis int64) {
	needV1(&testing.T{})
	gpus := make([]GPU, 8)
	for i := range gpus {
		gpus[i] = GPU{Index: i, Minor: i}
	}
	m, err := Open(Options{Mode: Required, Name: "bench-" + strconv.Itoa(b.N), Cores: seq(0, runtime.NumCPU()-1), GPUs: gpus, PidsMax: 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		g, err := m.Create("bench", int32(i), 1, Limits{CPUMillis: millis, MemoryMB: 256, GPUs: []int{1}})
		if err != nil {
			b.Fatal(err)
		}
		run(b, g)
		if _, err := g.Kill(time.Second); err != nil {
			b.Fatal(err)
		}
		_ = g.Usage()
		g.Remove()
	}
}
