package store

import (
	"context"
	"sync"

	"github.com/rlsched/rlsched/core"
)

// The bounds of PackingAtEnd: past them a run is not packed at its end,
// and the first SweepMetrics that reads it as rows packs it instead (the
// same code, sqlutil/packs.go), so a bound costs one read, never a point.
const (
	// packTracked bounds the runs remembered as having points and not
	// ended (a run that ends on another master stays until evicted).
	packTracked = 1 << 16
	// packRecent bounds the ended runs remembered, so that a late point
	// of one (a store outage's backlog), which drops its packs, packs it
	// again.
	packRecent = 1 << 16
	// packQueued bounds the ended runs waiting for the packer.
	packQueued = 1 << 14
)

// PackingAtEnd wraps st so that a run given metric points through it has
// its series packed (Store.PackSeries) once its end is committed, by one
// goroutine off the path of the end, started when runs wait and gone when
// none do (none outlives the work, whichever layer the master closes): a
// sweep's first curves then read one row per member instead of one per
// point. A point that arrives after a
// run's end (AppendMetrics drops the run's packs) packs it again. Runs that
// got no points through this layer (the dispatch of runs without metrics,
// runs of another master) cost a map lookup. Close stops the goroutine,
// leaving what it had not packed to the first read. Safe for concurrent use.
func PackingAtEnd(st Store) Store {
	ctx, cancel := context.WithCancel(context.Background())
	return &packingAtEnd{Store: st, points: map[string]struct{}{}, recent: map[string]struct{}{},
		ring: make([]string, packRecent), ctx: ctx, cancel: cancel}
}

type packingAtEnd struct {
	Store
	mu      sync.Mutex
	points  map[string]struct{} // runs given points, not seen ending
	recent  map[string]struct{} // runs seen ending, the last packRecent (ring)
	ring    []string
	next    int
	queue   []string // ended runs to pack
	running bool     // the packer's goroutine is on (p.queue is its)
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func (p *packingAtEnd) AppendMetrics(ctx context.Context, taskID string, pts []core.MetricPoint) error {
	err := p.Store.AppendMetrics(ctx, taskID, pts)
	if err != nil || len(pts) == 0 {
		return err
	}
	p.mu.Lock()
	if _, ended := p.recent[taskID]; ended {
		p.enqueue(taskID)
	} else if len(p.points) < packTracked {
		p.points[taskID] = struct{}{}
	}
	p.mu.Unlock()
	return nil
}

func (p *packingAtEnd) UpdateTask(ctx context.Context, t *core.Task, exp Expect) error {
	err := p.Store.UpdateTask(ctx, t, exp)
	if err == nil && t.Status.Terminal() {
		p.mu.Lock()
		p.ended(t.ID)
		p.mu.Unlock()
	}
	return err
}

func (p *packingAtEnd) UpdateTasks(ctx context.Context, us []Update) []error {
	errs := p.Store.UpdateTasks(ctx, us)
	locked := false
	for i, u := range us {
		if errs[i] != nil || !u.Task.Status.Terminal() {
			continue
		}
		if !locked {
			p.mu.Lock()
			locked = true
		}
		p.ended(u.Task.ID)
	}
	if locked {
		p.mu.Unlock()
	}
	return errs
}

// ended queues run id's series if it got points. p.mu is held.
func (p *packingAtEnd) ended(id string) {
	if _, ok := p.points[id]; !ok {
		return
	}
	delete(p.points, id)
	if old := p.ring[p.next]; old != "" {
		delete(p.recent, old)
	}
	p.ring[p.next], p.next = id, (p.next+1)%len(p.ring)
	p.recent[id] = struct{}{}
	p.enqueue(id)
}

// enqueue hands id to the packer, starting it. p.mu is held.
func (p *packingAtEnd) enqueue(id string) {
	if len(p.queue) >= packQueued || p.ctx.Err() != nil {
		return
	}
	p.queue = append(p.queue, id)
	if !p.running {
		p.running = true
		p.wg.Go(p.run)
	}
}

// run packs what ended, all that waits at once (a sweep's burst of ends
// becomes a few transactions of packs: PackSeries groups them), until
// nothing waits.
func (p *packingAtEnd) run() {
	for {
		p.mu.Lock()
		ids := p.queue
		p.queue = nil
		if len(ids) == 0 || p.ctx.Err() != nil {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		// An error leaves the runs to the first read; the store's own
		// outage handling is for facts, and a pack is only a cache.
		_ = p.Store.PackSeries(p.ctx, ids)
	}
}

// Close stops the packer (what waits is left to the first read) and
// closes the store below.
func (p *packingAtEnd) Close() error {
	// Under p.mu, so that no enqueue starts the packer after (its check of
	// ctx is under p.mu too) and the Wait follows every wg.Go.
	p.mu.Lock()
	p.cancel()
	p.mu.Unlock()
	p.wg.Wait()
	return p.Store.Close()
}
