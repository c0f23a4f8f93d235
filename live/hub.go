// Package live fans changes out to live subscribers (API.md "WebSocket
// /ws"): /topic/tasks, /topic/workers and /topic/logs/<taskId>, in the
// manner of centrifuge's hub: subscribers in sharded maps, a message encoded
// once and its bytes shared by every subscriber's queue, a queue per
// subscriber bounded in bytes.
//
// What it must never do: block a publisher (a subscriber whose queue is full
// is skipped ahead and told so with a `lagged` frame), write to a network
// connection (httpapi's /ws drains each Subscriber with one writer
// goroutine), or write a log file (package logpipe does; the hub only reads
// them).
//
// Log topics resume from a byte offset: the history comes from the run's log
// file, then the live stream, every byte once and in order. The file is the
// buffer that makes this exact: LogAppended must be called only after the
// bytes are in the file (written; not necessarily synced), in file order,
// which logpipe's writers guarantee (logpipe.LogSink).
package live

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/logpipe"
)

// Defaults of HubConfig.
const (
	DefaultQueueBytes       = 4 << 20
	DefaultMaxSubscriptions = 64
	DefaultHistoryChunk     = 64 << 10
)

const hubShards = 64

// HubConfig configures a Hub. Zero values get the defaults.
type HubConfig struct {
	// LogDir holds the run logs (<taskId>.log) that log subscriptions read
	// their history from.
	LogDir string
	// QueueBytes bounds the encoded frames queued for one subscriber.
	QueueBytes int
	// MaxSubscriptions bounds the topics one subscriber may hold.
	MaxSubscriptions int
	// HistoryChunk is the most log bytes per history message.
	HistoryChunk int
}

// Hub is the fan-out. It implements logpipe.LogSink and core.EventSink; all its methods
// are safe to call from any goroutine and none of them blocks on a
// subscriber.
type Hub struct {
	cfg     HubConfig
	shards  [hubShards]hubShard
	tasks   *hubTopic
	workers *hubTopic

	subscribers   atomic.Int64
	subscriptions atomic.Int64
	lagged        atomic.Int64
	dropped       atomic.Int64
	history       atomic.Int64
	published     atomic.Int64

	// onLive, when set (tests), is called as a log subscription goes live,
	// with its Subscriber's lock held: it must not block or call back.
	onLive func(s *Subscriber, topic string)
}

// hubShard holds the log topics whose run id hashes to it. Publishing holds
// the read lock, so a topic is never removed while a message goes out on it.
type hubShard struct {
	mu   sync.RWMutex
	logs map[string]*hubTopic
	_    [64 - 24 - 8]byte // one shard per 64-byte cache line (RWMutex 24, map 8)
}

// hubTopic is one topic and its subscriptions. For a log topic it also
// holds the carry: the last bytes announced when they ended inside a UTF-8
// character, sent with the next append so no message splits a character.
type hubTopic struct {
	name string
	kind TopicKind

	mu       sync.Mutex
	subs     map[*subscription]struct{}
	carry    []byte
	carryOff int64
	// end is the file offset after the last bytes announced (by this
	// process's writer or the file poller, poll.go); localAt the unix
	// nanoseconds of the last local announcement.
	end     int64
	localAt atomic.Int64
}

// logMsg is a piece of a run's log as published: raw bytes at off, and the
// frame shared by every subscriber that takes it whole.
type logMsg struct {
	off   int64
	raw   []byte
	frame []byte
}

func (m *logMsg) end() int64 { return m.off + int64(len(m.raw)) }

// NewHub returns a hub reading log history from cfg.LogDir.
func NewHub(cfg HubConfig) *Hub {
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = DefaultQueueBytes
	}
	if cfg.MaxSubscriptions <= 0 {
		cfg.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if cfg.HistoryChunk <= 0 {
		cfg.HistoryChunk = DefaultHistoryChunk
	}
	if cfg.HistoryChunk < 16 {
		cfg.HistoryChunk = 16
	}
	h := &Hub{
		cfg:     cfg,
		tasks:   newHubTopic(TopicTasks, TopicKindTasks),
		workers: newHubTopic(TopicWorkers, TopicKindWorkers),
	}
	for i := range h.shards {
		h.shards[i].logs = map[string]*hubTopic{}
	}
	return h
}

func newHubTopic(name string, kind TopicKind) *hubTopic {
	return &hubTopic{name: name, kind: kind, subs: map[*subscription]struct{}{}}
}

func (h *Hub) shard(taskID string) *hubShard {
	// FNV-1a
	x := uint32(2166136261)
	for i := 0; i < len(taskID); i++ {
		x ^= uint32(taskID[i])
		x *= 16777619
	}
	return &h.shards[x%hubShards]
}

// LogAppended publishes bytes just appended to a run's log file at
// fileOffset. Calls for one run must come in file order. Cheap when nobody
// follows the run; data is copied, the caller may reuse it.
func (h *Hub) LogAppended(taskID string, fileOffset int64, data []byte) {
	if len(data) == 0 || fileOffset < 0 {
		return
	}
	parts := [1][]byte{data}
	h.LogAppendedParts(taskID, fileOffset, parts[:])
}

// LogAppendedParts is LogAppended for bytes in pieces (logpipe.PartsSink):
// the writer need not join a batch's frames, the hub copies them into the
// one buffer it sends.
func (h *Hub) LogAppendedParts(taskID string, fileOffset int64, parts [][]byte) {
	if fileOffset < 0 {
		return
	}
	sh := h.shard(taskID)
	sh.mu.RLock()
	if t := sh.logs[taskID]; t != nil {
		t.localAt.Store(nanotime())
		t.publishLog(h, fileOffset, parts, false)
	}
	sh.mu.RUnlock()
}

// flushLog sends a run's carry, if any: the run ended, no byte will complete
// a character it left unfinished.
func (h *Hub) flushLog(taskID string) {
	sh := h.shard(taskID)
	sh.mu.RLock()
	if t := sh.logs[taskID]; t != nil {
		t.publishLog(h, 0, nil, true)
	}
	sh.mu.RUnlock()
}

// publishLog sends parts, the bytes at off, to the topic's subscribers,
// after the carry when it continues it. flush sends an unfinished character
// rather than keeping it back. The bytes are copied.
func (t *hubTopic) publishLog(h *Hub, off int64, parts [][]byte, flush bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if e := off + int64(n); n > 0 && e > t.end {
		t.end = e
	}
	var raw []byte
	if len(t.carry) > 0 {
		if n > 0 && t.carryOff+int64(len(t.carry)) != off {
			// Not contiguous (the writer skipped bytes): the carry goes alone.
			t.sendLocked(h, t.carryOff, t.carry)
			t.carry = nil
		} else {
			raw = slices.Grow(t.carry, n)
			off = t.carryOff
			t.carry = nil
		}
	}
	if raw == nil {
		raw = make([]byte, 0, n)
	}
	for _, p := range parts {
		raw = append(raw, p...)
	}
	if !flush {
		if n := utf8Cut(raw); n < len(raw) {
			t.carry = append([]byte(nil), raw[n:]...)
			t.carryOff = off + int64(n)
			raw = raw[:n]
		}
	}
	if len(raw) > 0 {
		t.sendLocked(h, off, raw)
	}
}

func (t *hubTopic) sendLocked(h *Hub, off int64, raw []byte) {
	m := &logMsg{off: off, raw: raw}
	// Room for an escaped newline every 16 bytes and the envelope.
	m.frame = appendLogFrame(make([]byte, 0, len(raw)+len(raw)/16+len(t.name)+96), t.name, off, raw)
	h.published.Add(1)
	for sub := range t.subs {
		sub.owner.deliverLog(sub, m)
	}
}

// TaskChanged publishes a run's new state on /topic/tasks: its env values
// to the subscribers who may see them (core.Task.EnvVisibleTo), "***" to
// the others. The event is encoded at most twice, full and masked, and
// each encoding shared by the subscribers that get it.
func (h *Hub) TaskChanged(task core.Task) {
	// Encoding is skipped with nobody listening: every run change comes
	// here, three per run (profiles of the dispatch benchmark).
	if h.tasks.listened() {
		v := task.View()
		full, err := encodeEvent(TopicTasks, "task", v)
		masked := full
		if err == nil && len(v.Env) > 0 {
			masked, err = encodeEvent(TopicTasks, "task", v.MaskedEnv())
		}
		if err == nil {
			h.tasks.publishEvents(h, func(viewer core.User) []byte {
				if task.EnvVisibleTo(viewer) {
					return full
				}
				return masked
			})
		}
	}
	if task.Status.Terminal() && core.ValidTaskID(task.ID) {
		h.flushLog(task.ID)
	}
}

// WorkerChanged publishes a worker's new view on /topic/workers.
func (h *Hub) WorkerChanged(w core.WorkerInfo) {
	if !h.workers.listened() {
		return
	}
	// Admins see who runs a foreign process on a GPU; others that it is
	// there (core.WorkerInfo.ForUser).
	full, err := encodeEvent(TopicWorkers, "worker", w.View())
	if err != nil {
		return
	}
	user, err := encodeEvent(TopicWorkers, "worker", w.ForUser().View())
	if err != nil {
		return
	}
	h.workers.publishEvents(h, func(viewer core.User) []byte {
		if viewer.Role == core.RoleAdmin {
			return full
		}
		return user
	})
}

// listened reports whether the topic has a subscriber now; one attaching
// right after misses the event as it would have a moment earlier.
func (t *hubTopic) listened() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.subs) > 0
}

// publishEvents offers each subscriber of the topic the frame frameFor
// picks for its viewer; frameFor must not block (it picks among frames
// encoded before).
func (t *hubTopic) publishEvents(h *Hub, frameFor func(viewer core.User) []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.subs) == 0 {
		return
	}
	h.published.Add(1)
	for sub := range t.subs {
		sub.owner.deliverEvent(sub, frameFor(sub.owner.viewer))
	}
}

// attach adds sub to its topic, creating a log topic on first use.
func (h *Hub) attach(sub *subscription) {
	if sub.kind != TopicKindLogs {
		t := h.tasks
		if sub.kind == TopicKindWorkers {
			t = h.workers
		}
		t.mu.Lock()
		t.subs[sub] = struct{}{}
		t.mu.Unlock()
		h.subscriptions.Add(1)
		return
	}
	size := h.fileSize(sub.taskID) // poll.go: where a poll starts
	sh := h.shard(sub.taskID)
	sh.mu.Lock()
	t := sh.logs[sub.taskID]
	if t == nil {
		t = newHubTopic(sub.name, TopicKindLogs)
		t.end = size
		sh.logs[sub.taskID] = t
	}
	t.mu.Lock()
	t.subs[sub] = struct{}{}
	t.mu.Unlock()
	sh.mu.Unlock()
	h.subscriptions.Add(1)
}

// detach removes sub from its topic, if there, and an empty log topic from
// its shard. It may run before attach (a Close racing a Subscribe); then
// it does nothing and the subscriber detaches again after attaching.
func (h *Hub) detach(sub *subscription) {
	var ok bool
	if sub.kind != TopicKindLogs {
		t := h.tasks
		if sub.kind == TopicKindWorkers {
			t = h.workers
		}
		t.mu.Lock()
		_, ok = t.subs[sub]
		delete(t.subs, sub)
		t.mu.Unlock()
	} else {
		sh := h.shard(sub.taskID)
		sh.mu.Lock()
		if t := sh.logs[sub.taskID]; t != nil {
			t.mu.Lock()
			_, ok = t.subs[sub]
			delete(t.subs, sub)
			if len(t.subs) == 0 {
				delete(sh.logs, sub.taskID)
			}
			t.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	if ok {
		h.subscriptions.Add(-1)
	}
}

// HubStats are the hub's counters, for the health endpoint and tests.
type HubStats struct {
	Subscribers   int64 `json:"subscribers"`
	Subscriptions int64 `json:"subscriptions"`
	// Published counts messages encoded for at least one subscriber.
	Published int64 `json:"published"`
	// Lagged counts times a subscriber was skipped ahead; Dropped the
	// messages it missed.
	Lagged  int64 `json:"lagged"`
	Dropped int64 `json:"dropped"`
	// HistoryBytes counts log bytes sent from files to catching-up subscribers.
	HistoryBytes int64 `json:"historyBytes"`
}

// Stats returns the current counters.
func (h *Hub) Stats() HubStats {
	return HubStats{
		Subscribers:   h.subscribers.Load(),
		Subscriptions: h.subscriptions.Load(),
		Published:     h.published.Load(),
		Lagged:        h.lagged.Load(),
		Dropped:       h.dropped.Load(),
		HistoryBytes:  h.history.Load(),
	}
}

var (
	_ logpipe.PartsSink = (*Hub)(nil)
	_ logpipe.LogSink   = (*Hub)(nil)
	_ core.EventSink    = (*Hub)(nil)
)
