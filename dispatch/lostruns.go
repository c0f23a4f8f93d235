package dispatch

import (
	"sync"
	"time"

	"github.com/rlsched/rlsched/internal/backoff"
)

// lostRuns is the reaper's queue of runs found lost whose LOST or requeue
// write the store has not taken yet, by task id (reaper.lost). It owns
// its table and the mutex that guards it, and only keeps the queue: the
// reaper does the writes (retryLost). It never does I/O or blocks while
// holding the mutex. Every method is safe from any goroutine (the reaper,
// the shards that find runs gone, reconcile).
type lostRuns struct {
	mu      sync.Mutex
	retries map[string]*lostRetry
}

// lostRetry is a run found lost whose LOST or requeue write is still to
// land (reaper.lost).
type lostRetry struct {
	fence     uint64
	reason    string
	cancelled bool
	bo        backoff.Backoff
	next      time.Time
}

// lostRetryMax bounds the pause between two tries of a lost run's writes:
// once the store is back, the run is requeued within it.
const lostRetryMax = 5 * time.Second

// add queues run id, lost at fence, for its first retry after a pause from
// now; false when it (or a newer claim of it) is queued already.
func (l *lostRuns) add(id string, fence uint64, reason string, cancelled bool, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.retries[id]; r != nil && r.fence >= fence {
		return false
	}
	r := &lostRetry{fence: fence, reason: reason, cancelled: cancelled, bo: backoff.Backoff{Max: lostRetryMax}}
	r.next = now.Add(r.bo.Delay())
	if l.retries == nil {
		l.retries = map[string]*lostRetry{}
	}
	l.retries[id] = r
	return true
}

// pending reports whether id is queued.
func (l *lostRuns) pending(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.retries[id] != nil
}

// dueLost is a queued run whose retry is due.
type dueLost struct {
	id string
	r  *lostRetry
}

// due lists the runs whose retry is due at now.
func (l *lostRuns) due(now time.Time) []dueLost {
	l.mu.Lock()
	defer l.mu.Unlock()
	var todo []dueLost
	for id, r := range l.retries {
		if !now.Before(r.next) {
			todo = append(todo, dueLost{id, r})
		}
	}
	return todo
}

// tried records the end of d's retry: again, the next is due after a
// longer pause from now; else d leaves the queue (unless a newer loss of
// the run replaced it meanwhile).
func (l *lostRuns) tried(d dueLost, again bool, now func() time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if again {
		d.r.next = now().Add(d.r.bo.Delay())
	} else if l.retries[d.id] == d.r {
		delete(l.retries, d.id)
	}
}
