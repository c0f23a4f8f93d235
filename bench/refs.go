package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rlsched/rlsched/bench/internal/echo"
	"github.com/rlsched/rlsched/bench/internal/hist"
)

// fsyncRate measures how many 4 KiB write + fdatasync pairs per second the
// file system under dir sustains: the ceiling of one SQLite writer that
// commits (synchronous=FULL, WAL) one transaction at a time.
func fsyncRate(dir string, d time.Duration) (float64, error) {
	st, err := fsyncStats(dir, d)
	return st.rate, err
}

// fsyncStat is fsyncRate with the latency of one write + fdatasync.
type fsyncStat struct {
	rate     float64
	p50, p99 time.Duration
}

func fsyncStats(dir string, d time.Duration) (fsyncStat, error) {
	f, err := os.CreateTemp(dir, "fsync-*")
	if err != nil {
		return fsyncStat{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	// Like a WAL that is reused after checkpoints: overwrite a ring of
	// blocks in a preallocated file, so no write extends the file.
	const ring = 256
	buf := make([]byte, 4096)
	if err := f.Truncate(ring * 4096); err != nil {
		return fsyncStat{}, err
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fsyncStat{}, err
	}
	var h hist.Hist
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		t0 := time.Now()
		if _, err := f.WriteAt(buf, int64(n%ring)*4096); err != nil {
			return fsyncStat{}, err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return fsyncStat{}, err
		}
		h.AddDuration(time.Since(t0))
		n++
	}
	return fsyncStat{rate: float64(n) / time.Since(start).Seconds(), p50: h.QuantileDuration(0.5), p99: h.QuantileDuration(0.99)}, nil
}

// forkExecRate measures how many /bin/true processes per second conc
// goroutines start and reap (exec.Cmd.Run, the worker's own path minus
// pipes and process groups).
func forkExecRate(conc int, d time.Duration) (float64, error) {
	rate, _, err := forkExecCPU(conc, d)
	return rate, err
}

// forkExecCPU is forkExecRate with the CPU time one fork/exec/wait costs,
// this process's and the child's (getrusage of self and children).
func forkExecCPU(conc int, d time.Duration) (float64, time.Duration, error) {
	cpu := func() time.Duration {
		var self, kids unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
		_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
		var t time.Duration
		for _, tv := range []unix.Timeval{self.Utime, self.Stime, kids.Utime, kids.Stime} {
			t += time.Duration(tv.Nano())
		}
		return t
	}
	c0 := cpu()
	var n atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for time.Since(start) < d {
				if err := exec.Command("/bin/true").Run(); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, 0, fmt.Errorf("cannot run /bin/true: %w", err)
	}
	rate := float64(n.Load()) / time.Since(start).Seconds()
	return rate, (cpu() - c0) / time.Duration(max(n.Load(), 1)), nil
}

// echoResult is the raw loopback reference.
type echoResult struct {
	rate      float64 // round trips per second
	p50, p99  time.Duration
	cpuPerMsg time.Duration // server CPU per echoed message
}

// loopbackEcho starts the echo helper and runs the ping-pong client
// against it with conns connections of size-byte messages for d.
func (e *env) loopbackEcho(conns, size int, d time.Duration) (echoResult, error) {
	port, err := freePort()
	if err != nil {
		return echoResult{}, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	c, err := e.startChild("echo", map[string]string{"Addr": addr})
	if err != nil {
		return echoResult{}, err
	}
	defer c.stop()
	s0 := sample(c.pid())
	rate, h, err := echo.PingPong(addr, conns, size, d)
	if err != nil {
		return echoResult{}, err
	}
	s1 := sample(c.pid())
	msgs := rate * s1.at.Sub(s0.at).Seconds()
	r := echoResult{rate: rate, p50: h.QuantileDuration(0.5), p99: h.QuantileDuration(0.99)}
	if msgs > 0 {
		r.cpuPerMsg = time.Duration(float64(s0.cpuTo(s1)) / msgs)
	}
	return r, nil
}

// latencies joins submit times with ExecuteTask arrivals.
func latencies(sent map[string]int64, execs []fleetExec) (*hist.Hist, int) {
	var h hist.Hist
	seen := 0
	for _, x := range execs {
		if t, ok := sent[x.TaskID]; ok {
			h.Add(x.AtNs - t)
			seen++
		}
	}
	return &h, seen
}

// tmpDirFor names a data directory kind for tables.
func placeName(onTmpfs bool) string {
	if onTmpfs {
		return "tmpfs (/dev/shm)"
	}
	return "disk (" + filepath.Dir(os.TempDir()+"/x") + ")"
}
