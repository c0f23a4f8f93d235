package dispatch

import (
	"os"
	"runtime"
	"sync"
)

// gnet's pollers (its acceptor and each event loop) wait in epoll_wait as
// an ordinary system call, and a goroutine in a system call keeps its P
// until sysmon takes it back, which takes two of sysmon's ticks (up to
// 10 ms each once the process has been quiet). With as many event loops
// as Ps, every P can sit in such a wait while the runtime's own netpoller
// has a REST request, a store's answer or a Redis reply ready, and nothing
// runs it until sysmon comes round: that was the whole ≈ 10 ms p99 of
// submit-to-start in the dispatch bench (docs/decisions.md, issue 19). So
// the process gets a P for each poller on top of the ones it had; an idle
// P costs nothing.

var loopsOnce struct {
	sync.Once
	n int
}

// eventLoops is how many event loops a master's RPC server runs: one per
// P the process had before any master started (in a container with a CPU
// quota the runtime's default GOMAXPROCS is the quota, not the CPUs the
// machine shows). The first call gives the process a P for each of them
// and the acceptor on top, unless the operator set GOMAXPROCS.
func eventLoops() int {
	loopsOnce.Do(func() {
		loopsOnce.n = runtime.GOMAXPROCS(0)
		if os.Getenv("GOMAXPROCS") == "" {
			runtime.GOMAXPROCS(2*loopsOnce.n + 1)
		}
	})
	return loopsOnce.n
}
