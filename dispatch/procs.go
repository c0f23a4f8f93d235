package dispatch

import (
	"os"
	"runtime"
	"sync"
)

// gnet's pollers (its acceptor and each event loop) wait in epoll_wait as
// an ordinary system call, and a goroutine in a system call keeps its P
// until sysmon takes it back, which takes two of sysmon's ticks (up to
// 10 ms each once the process has been quiet). With GOMAXPROCS at the
// number of CPUs and as many event loops, every P can sit in such a wait
// while the runtime's own netpoller has a REST request, a store's answer
// or a Redis reply ready, and nothing runs it until sysmon comes round:
// that was the whole ≈ 10 ms p99 of submit-to-start in the dispatch bench
// (docs/decisions.md, issue 19). So the process gets a P for each poller
// on top of its CPUs; an idle P costs nothing.

var reserveOnce sync.Once

// reserveProcs raises GOMAXPROCS by pollers, once per process, unless the
// operator set GOMAXPROCS.
func reserveProcs(pollers int) {
	reserveOnce.Do(func() {
		if os.Getenv("GOMAXPROCS") != "" {
			return
		}
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + pollers)
	})
}
