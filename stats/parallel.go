package stats

import (
	"runtime"
	"sync"
)

// eachGroup calls f(w, i) for i in [0, n) on up to GOMAXPROCS goroutines, w
// being the goroutine's number (for its scratch space), and waits for all.
// Each group draws from its own stream, so the answer is the same however
// the groups are spread.
func eachGroup(n int, f func(w, i int)) {
	workers := max(1, min(n, runtime.GOMAXPROCS(0)))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		next int
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				f(w, i)
			}
		}()
	}
	wg.Wait()
}
