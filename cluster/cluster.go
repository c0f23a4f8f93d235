// Package cluster joins several masters that share one store and one Redis
// into one system for what is not in the store: live events and the worker
// list. Each master publishes the run and worker changes it originates on a
// Redis pub/sub channel under REDIS_PREFIX and delivers the other masters'
// changes to its own hub, so a WebSocket client sees every change whichever
// master it is connected to, and each change once. Cancel requests travel
// the same way, so the master holding the run's worker delivers them at
// once (the store keeps them durably; pub/sub is best effort).
//
// Worker views: each master publishes a worker's view when it changes and
// all of its workers every SnapshotInterval; the others keep them and drop
// a master's views when its snapshots stop for three intervals (it died),
// so /api/workers shows the cluster's workers on every master.
//
// What it must never do: block a caller on Redis (a full outgoing queue
// drops the message and counts it in Dropped; dashboards resync over REST),
// or be the truth of anything the store holds.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/backoff"
	"github.com/rlsched/rlsched/internal/rediskey"
)

// Config of a Node.
type Config struct {
	Addr             string // Redis host:port
	Prefix           string // REDIS_PREFIX: the channel is <prefix>:cluster (package rediskey)
	MasterID         string
	Local            core.EventSink // the local hub
	SnapshotInterval time.Duration  // default 5s
	Logger           zerolog.Logger
}

// message is what travels on the channel.
type message struct {
	Origin  string            `json:"o"`
	Kind    string            `json:"k"` // task | worker | workers | cancel | drain | forget
	Task    *wireTask         `json:"t,omitempty"`
	Worker  *core.WorkerInfo  `json:"w,omitempty"`
	Workers []core.WorkerInfo `json:"ws,omitempty"`
	ID      string            `json:"id,omitempty"`
	Drain   bool              `json:"d,omitempty"` // drain: on or off
}

// wireTask is a run as masters exchange it: its view, with the fence that
// core.Task's JSON leaves out for clients (a master forgets a run another
// one took over by comparing fences).
type wireTask struct {
	core.Task
	Fence uint64 `json:"fence"`
}

// MarshalJSON is core.Task's JSON with the fence added: core.Task's own
// MarshalJSON (its "gpus" a fraction or whole GPUs), promoted, would
// leave Fence out.
func (w wireTask) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(w.Task)
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[len(b)-1] != '}' {
		return nil, fmt.Errorf("BUG: a run's JSON is not an object: %.40s", b)
	}
	sep := ","
	if len(b) == 2 {
		sep = ""
	}
	return fmt.Appendf(b[:len(b)-1], `%s"fence":%d}`, sep, w.Fence), nil
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (w *wireTask) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &w.Task); err != nil {
		return err
	}
	var f struct {
		Fence uint64 `json:"fence"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	w.Fence = f.Fence
	return nil
}

type remoteView struct {
	info core.WorkerInfo
	seen time.Time
}

// Node is one master's membership. Its methods are safe for concurrent use
// and never block on Redis.
type Node struct {
	cfg     Config
	log     zerolog.Logger
	c       rueidis.Client
	channel string
	out     chan []byte
	dropped atomic.Int64

	mu       sync.Mutex
	hooks    Hooks
	remote   map[string]map[string]remoteView // master → worker → view
	lastSnap map[string]time.Time             // master → its last snapshot

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New connects to Redis. Call Attach, then Start.
func New(cfg Config) (*Node, error) {
	if cfg.SnapshotInterval <= 0 {
		cfg.SnapshotInterval = 5 * time.Second
	}
	if cfg.MasterID == "" || cfg.Local == nil {
		return nil, errors.New("BUG: a cluster node needs a master id and a local sink")
	}
	if err := rediskey.Check(cfg.Prefix); err != nil {
		return nil, err
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{cfg.Addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With().Str("component", "cluster").Logger(), c: c,
		channel: rediskey.Channel(cfg.Prefix, rediskey.Cluster), out: make(chan []byte, 8192),
		remote: map[string]map[string]remoteView{}, lastSnap: map[string]time.Time{}}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	return n, nil
}

// Hooks connect a node to its dispatcher. Each may be nil; none may block.
type Hooks struct {
	// Workers is the local worker list.
	Workers func() []core.WorkerInfo
	// Cancel receives the cancel requests other masters recorded.
	Cancel func(id string)
	// Task receives the run changes of other masters (after the hub): to
	// wake the scheduler for a queued run, and to forget a run another
	// master finished or requeued.
	Task func(t core.Task)
	// Drain and Forget receive an admin's drain and forget of a worker
	// made on another master, for the one that holds the worker.
	Drain  func(workerID string, drain bool)
	Forget func(workerID string)
}

// Attach connects the node to its dispatcher.
func (n *Node) Attach(h Hooks) {
	n.mu.Lock()
	n.hooks = h
	n.mu.Unlock()
}

func (n *Node) getHooks() Hooks {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hooks
}

// Start subscribes and starts publishing.
func (n *Node) Start() {
	n.wg.Add(3)
	go func() { defer n.wg.Done(); n.subscribeLoop() }()
	go func() { defer n.wg.Done(); n.publishLoop() }()
	go func() { defer n.wg.Done(); n.snapshotLoop() }()
}

// Close stops the node and its client.
func (n *Node) Close() {
	n.cancel()
	n.wg.Wait()
	n.c.Close()
}

// Dropped counts messages not published because the queue was full.
func (n *Node) Dropped() int64 { return n.dropped.Load() }

// TaskChanged delivers a local run change to the local hub and the others.
func (n *Node) TaskChanged(t core.Task) {
	n.cfg.Local.TaskChanged(t)
	// What JSON cannot carry, the hub would not show either.
	n.publish(message{Kind: "task", Task: &wireTask{Task: t.View(), Fence: t.Fence}})
}

// WorkerChanged delivers a local worker view. A view of a worker this
// master does not hold (a run of it was recovered here, say) while another
// master holds it connected is not published: it would show a connected
// worker as gone.
func (n *Node) WorkerChanged(w core.WorkerInfo) {
	if !connected(w) {
		if _, ok := n.remoteConnected(w.ID); ok {
			return
		}
	}
	n.cfg.Local.WorkerChanged(w)
	n.publish(message{Kind: "worker", Worker: &w})
}

// Cancel tells the other masters that a run's cancel was requested.
func (n *Node) Cancel(id string) { n.publish(message{Kind: "cancel", ID: id}) }

// Drain tells the other masters that an admin drained (or undrained) a worker.
func (n *Node) Drain(workerID string, drain bool) {
	n.publish(message{Kind: "drain", ID: workerID, Drain: drain})
}

// Forget tells the other masters that an admin forgot a DOWN worker.
func (n *Node) Forget(workerID string) { n.publish(message{Kind: "forget", ID: workerID}) }

func (n *Node) publish(m message) {
	m.Origin = n.cfg.MasterID
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	select {
	case n.out <- b:
	default:
		// Never block a writer: live views resync over REST.
		n.dropped.Add(1)
	}
}

// publishLoop sends queued messages, pipelining what has accumulated.
func (n *Node) publishLoop() {
	var batch rueidis.Commands
	for {
		select {
		case <-n.ctx.Done():
			return
		case b := <-n.out:
			batch = append(batch[:0], n.c.B().Publish().Channel(n.channel).Message(rueidis.BinaryString(b)).Build())
		}
	more:
		for len(batch) < 256 {
			select {
			case b := <-n.out:
				batch = append(batch, n.c.B().Publish().Channel(n.channel).Message(rueidis.BinaryString(b)).Build())
			default:
				break more
			}
		}
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		for _, r := range n.c.DoMulti(ctx, batch...) {
			if err := r.Error(); err != nil && n.ctx.Err() == nil {
				n.dropped.Add(1)
			}
		}
		cancel()
	}
}

func (n *Node) subscribeLoop() {
	bo := backoff.Backoff{Max: 2 * time.Second}
	for n.ctx.Err() == nil {
		err := n.c.Receive(n.ctx, n.c.B().Subscribe().Channel(n.channel).Build(), n.receive)
		if n.ctx.Err() != nil {
			return
		}
		n.log.Warn().Err(err).Msg("cluster subscription ended; resubscribing")
		if !backoff.Sleep(n.ctx, bo.Delay()) {
			return
		}
	}
}

func (n *Node) receive(msg rueidis.PubSubMessage) {
	var m message
	if err := json.Unmarshal([]byte(msg.Message), &m); err != nil || m.Origin == n.cfg.MasterID || m.Origin == "" {
		return
	}
	now := time.Now()
	switch m.Kind {
	case "task":
		if m.Task == nil {
			return
		}
		t := m.Task.Task
		t.Fence = m.Task.Fence
		n.cfg.Local.TaskChanged(t)
		if f := n.getHooks().Task; f != nil {
			f(t)
		}
	case "worker":
		if m.Worker == nil {
			return
		}
		n.mu.Lock()
		views := n.remote[m.Origin]
		if views == nil {
			views = map[string]remoteView{}
			n.remote[m.Origin] = views
		}
		views[m.Worker.ID] = remoteView{info: *m.Worker, seen: now}
		if _, ok := n.lastSnap[m.Origin]; !ok {
			n.lastSnap[m.Origin] = now
		}
		n.mu.Unlock()
		// What the local clients see is the cluster's best view of the
		// worker: "gone" from a master it left is not news when it is
		// connected here or to a third master.
		if w, ok := n.view(m.Worker.ID); ok {
			n.cfg.Local.WorkerChanged(w)
		}
	case "workers":
		views := make(map[string]remoteView, len(m.Workers))
		for _, w := range m.Workers {
			views[w.ID] = remoteView{info: w, seen: now}
		}
		n.mu.Lock()
		n.remote[m.Origin] = views
		n.lastSnap[m.Origin] = now
		n.mu.Unlock()
	case "cancel":
		if f := n.getHooks().Cancel; f != nil && m.ID != "" {
			f(m.ID)
		}
	case "drain":
		if f := n.getHooks().Drain; f != nil && m.ID != "" {
			f(m.ID, m.Drain)
		}
	case "forget":
		if f := n.getHooks().Forget; f != nil && m.ID != "" {
			f(m.ID)
		}
	}
}

// snapshotLoop publishes all local workers periodically (a master that
// joined later, or missed messages, learns them) and expires the views of
// masters that went silent.
func (n *Node) snapshotLoop() {
	tick := time.NewTicker(n.cfg.SnapshotInterval)
	defer tick.Stop()
	for {
		if local := n.getHooks().Workers; local != nil {
			n.publish(message{Kind: "workers", Workers: local()})
		}
		n.expire(time.Now())
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (n *Node) expire(now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for m, at := range n.lastSnap {
		if now.Sub(at) > 3*n.cfg.SnapshotInterval {
			delete(n.lastSnap, m)
			delete(n.remote, m)
		}
	}
}

func connected(w core.WorkerInfo) bool {
	return w.State == core.WorkerIdle || w.State == core.WorkerRunning || w.State == core.WorkerDraining
}

// remoteConnected returns another master's view of a worker it holds.
func (n *Node) remoteConnected(id string) (core.WorkerInfo, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var best core.WorkerInfo
	ok := false
	for _, views := range n.remote {
		if v, has := views[id]; has && connected(v.info) && (!ok || v.info.LastHeartbeatAt.After(best.LastHeartbeatAt)) {
			best, ok = v.info, true
		}
	}
	return best, ok
}

// Workers merges the local and remote views, one per worker: a view from
// the master the worker is connected to wins over stale ones (a master
// that lost it, or one that recovered its runs); among equals the most
// recent heartbeat wins, and this master's own view on a tie.
func (n *Node) Workers() []core.WorkerInfo {
	local := n.getHooks().Workers
	byID := map[string]core.WorkerInfo{}
	if local != nil {
		for _, w := range local() {
			byID[w.ID] = w
		}
	}
	n.expire(time.Now())
	n.mu.Lock()
	for _, views := range n.remote {
		for id, v := range views {
			cur, has := byID[id]
			if !has || better(v.info, cur) {
				byID[id] = v.info
			}
		}
	}
	n.mu.Unlock()
	out := make([]core.WorkerInfo, 0, len(byID))
	for _, w := range byID {
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// view is the merged view of one worker.
func (n *Node) view(id string) (core.WorkerInfo, bool) {
	for _, w := range n.Workers() {
		if w.ID == id {
			return w, true
		}
	}
	return core.WorkerInfo{}, false
}

// better reports whether view a should replace view b of one worker.
func better(a, b core.WorkerInfo) bool {
	if connected(a) != connected(b) {
		return connected(a)
	}
	return a.LastHeartbeatAt.After(b.LastHeartbeatAt)
}
