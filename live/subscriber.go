package live

import (
	"errors"
	"sync"

	"github.com/rlsched/rlsched/core"
)

// Errors of Subscriber.
var (
	ErrTooManySubscriptions = errors.New("too many subscriptions on one connection")
	// ErrQueueFull: a control frame (an acknowledgement, an error) found the
	// queue full: the peer sends but does not read; close it.
	ErrQueueFull = errors.New("subscriber queue full: the client does not read")
	ErrClosed    = errors.New("subscriber closed")
	ErrBadOffset = errors.New("offset must be a byte offset ≥ 0")
)

// Subscriber is one client of the hub (one WebSocket): its subscriptions
// and its queue of encoded frames, bounded in bytes. Its owner drains the
// queue with one writer goroutine (Ready, then Drain) and calls Close when
// the client goes away.
//
// Every method is safe to call from any goroutine.
type Subscriber struct {
	hub    *Hub
	viewer core.User     // who reads: picks the frames of /topic/tasks (env values or "***")
	ready  chan struct{} // holds a token while frames wait

	mu      sync.Mutex
	drained sync.Cond // on mu: the queue shrank, or a subscription closed
	closed  bool
	queue   [][]byte
	queued  int // bytes in queue
	subs    map[string]*subscription
	nLagged int // subscriptions with lagged set

	catchups sync.WaitGroup
}

// subscription is one topic of one Subscriber. Its fields are guarded by
// the owner's mu.
type subscription struct {
	owner  *Subscriber
	name   string
	kind   TopicKind
	taskID string

	closed bool
	// lagged: messages were dropped since the last delivery; a lagged
	// frame goes before the next one (offset next, for a log).
	lagged bool

	// Log topics only.
	next     int64 // offset of the next byte owed to the client
	live     bool  // false while catching up from the file
	runEnded bool  // the run had ended when subscribed
	// pending holds live messages published while catching up, in order;
	// bounded by QueueBytes, past which they are dropped (the file has them).
	pending      []*logMsg
	pendingBytes int
}

// SubscribeOptions of a subscription.
type SubscribeOptions struct {
	// Offset is the byte offset a log subscription starts at.
	Offset int64
	// RunEnded tells a log subscription that the run has ended, so the
	// history is sent up to the file's very end even if it stops inside a
	// UTF-8 character (which is otherwise held back for the next append).
	RunEnded bool
}

// NewSubscriber returns a subscriber with no subscriptions that reads as
// viewer, the authenticated user of the connection: /topic/tasks shows it
// a run's env values only when viewer owns the run or is an admin.
func (h *Hub) NewSubscriber(viewer core.User) *Subscriber {
	s := &Subscriber{hub: h, viewer: viewer, ready: make(chan struct{}, 1), subs: map[string]*subscription{}}
	s.drained.L = &s.mu
	h.subscribers.Add(1)
	return s
}

// Subscribe subscribes to topic (API.md's names, see ParseTopic), replacing
// an earlier subscription to it. It queues {"type":"subscribed",...} before
// any message of the topic. A log subscription first sends the run's log
// from o.Offset as the file has it, then live appends, each byte once.
//
// Errors: ErrBadTopic, ErrBadOffset, ErrTooManySubscriptions, ErrQueueFull,
// ErrClosed. The caller checks that the run exists.
func (s *Subscriber) Subscribe(topic string, o SubscribeOptions) error {
	kind, id, err := ParseTopic(topic)
	if err != nil {
		return err
	}
	if o.Offset < 0 {
		return ErrBadOffset
	}
	sub := &subscription{owner: s, name: topic, kind: kind, taskID: id, next: o.Offset, runEnded: o.RunEnded}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	old := s.subs[topic]
	if old == nil && len(s.subs) >= s.hub.cfg.MaxSubscriptions {
		s.mu.Unlock()
		return ErrTooManySubscriptions
	}
	ack := appendAckFrame(nil, "subscribed", topic, o.Offset, kind == TopicKindLogs)
	if err := s.controlLocked(ack); err != nil {
		s.mu.Unlock()
		return err
	}
	if old != nil {
		s.closeSubLocked(old)
	}
	s.subs[topic] = sub
	s.mu.Unlock()
	if old != nil {
		s.drained.Broadcast()
		s.hub.detach(old)
	}

	s.hub.attach(sub)
	s.mu.Lock()
	if sub.closed { // unsubscribed or closed meanwhile
		s.mu.Unlock()
		s.hub.detach(sub)
		return nil
	}
	if kind == TopicKindLogs {
		s.startCatchUpLocked(sub)
	}
	s.mu.Unlock()
	return nil
}

// Unsubscribe ends the subscription to topic, if any, and queues
// {"type":"unsubscribed",...}. Only ErrQueueFull and ErrClosed are returned.
func (s *Subscriber) Unsubscribe(topic string) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	sub := s.subs[topic]
	if sub != nil {
		s.closeSubLocked(sub)
	}
	err := s.controlLocked(appendAckFrame(nil, "unsubscribed", topic, 0, false))
	s.mu.Unlock()
	if sub != nil {
		s.drained.Broadcast()
		s.hub.detach(sub)
	}
	return err
}

// Send queues a frame of the caller's (an error answer). ErrQueueFull when
// the queue is full, ErrClosed after Close.
func (s *Subscriber) Send(frame []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.controlLocked(frame)
}

// Ready receives a value when frames may be waiting; then call Drain.
func (s *Subscriber) Ready() <-chan struct{} { return s.ready }

// Drain appends every queued frame to dst, in order, followed by the lagged
// frames owed, and empties the queue. It never blocks. The frames are
// shared with other subscribers: read them, never modify them.
func (s *Subscriber) Drain(dst [][]byte) [][]byte {
	s.mu.Lock()
	dst = append(dst, s.queue...)
	clear(s.queue)
	s.queue = s.queue[:0]
	s.queued = 0
	if s.nLagged > 0 {
		for _, sub := range s.subs {
			if sub.lagged {
				dst = append(dst, sub.laggedFrame())
				sub.lagged = false
			}
		}
		s.nLagged = 0
	}
	s.mu.Unlock()
	s.drained.Broadcast()
	return dst
}

// Close ends every subscription and waits for history readers to stop.
// The queue is dropped. Safe to call more than once.
func (s *Subscriber) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	subs := make([]*subscription, 0, len(s.subs))
	for _, sub := range s.subs {
		s.closeSubLocked(sub)
		subs = append(subs, sub)
	}
	clear(s.queue)
	s.queue, s.queued = nil, 0
	s.mu.Unlock()
	s.drained.Broadcast()
	for _, sub := range subs {
		s.hub.detach(sub)
	}
	s.catchups.Wait()
	s.hub.subscribers.Add(-1)
}

func (s *Subscriber) closeSubLocked(sub *subscription) {
	sub.closed = true
	if sub.lagged {
		sub.lagged = false
		s.nLagged--
	}
	clear(sub.pending)
	sub.pending, sub.pendingBytes = nil, 0
	if s.subs[sub.name] == sub {
		delete(s.subs, sub.name)
	}
}

// controlLocked queues a frame of the connection itself; it may pass the
// bound by one frame, so a full queue of messages still gets its answer.
func (s *Subscriber) controlLocked(frame []byte) error {
	if s.queued > s.hub.cfg.QueueBytes {
		return ErrQueueFull
	}
	s.pushLocked(frame)
	return nil
}

func (s *Subscriber) pushLocked(frame []byte) {
	s.queue = append(s.queue, frame)
	s.queued += len(frame)
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// pushSubLocked queues a message of sub, after the lagged frame it owes.
func (s *Subscriber) pushSubLocked(sub *subscription, frame []byte) {
	if sub.lagged {
		s.pushLocked(sub.laggedFrame())
		sub.lagged = false
		s.nLagged--
	}
	s.pushLocked(frame)
}

// dropLocked skips a message sub has no room for.
func (s *Subscriber) dropLocked(sub *subscription) {
	if !sub.lagged {
		sub.lagged = true
		s.nLagged++
		s.hub.lagged.Add(1)
	}
	s.hub.dropped.Add(1)
}

func (sub *subscription) laggedFrame() []byte {
	return appendLaggedFrame(nil, sub.name, sub.next, sub.kind == TopicKindLogs)
}

// deliverEvent offers a task or worker frame to sub. Called with the
// topic's lock held; never blocks.
func (s *Subscriber) deliverEvent(sub *subscription, frame []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub.closed {
		return
	}
	if s.queued+len(frame) > s.hub.cfg.QueueBytes {
		s.dropLocked(sub)
		return
	}
	s.pushSubLocked(sub, frame)
}

// deliverLog offers a log message to sub. Called with the topic's lock
// held, in file order; never blocks.
func (s *Subscriber) deliverLog(sub *subscription, m *logMsg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub.closed {
		return
	}
	if !sub.live {
		if sub.pendingBytes+len(m.raw) > s.hub.cfg.QueueBytes {
			// The file has these bytes: the history reader fetches them.
			clear(sub.pending)
			sub.pending, sub.pendingBytes = sub.pending[:0], 0
		}
		sub.pending = append(sub.pending, m)
		sub.pendingBytes += len(m.raw)
		return
	}
	if m.end() <= sub.next {
		return // the history already had it
	}
	if m.off > sub.next {
		// Bytes before m were never announced to this topic (the topic was
		// created after they were written, or the writer skipped them):
		// read them from the file, then continue with m.
		sub.live = false
		sub.pending = append(sub.pending[:0], m)
		sub.pendingBytes = len(m.raw)
		s.startCatchUpLocked(sub)
		return
	}
	s.pushLogLocked(sub, m, false)
}

// pushLogLocked queues the part of m from sub.next on; m.off ≤ sub.next <
// m.end(). A live message that finds the queue full is dropped (lagged);
// history is set by the history reader, which waits for room itself and so
// never drops.
func (s *Subscriber) pushLogLocked(sub *subscription, m *logMsg, history bool) {
	frame := m.frame
	if m.off < sub.next {
		rest := m.raw[sub.next-m.off:]
		frame = appendLogFrame(make([]byte, 0, len(rest)+len(sub.name)+96), sub.name, sub.next, rest)
	}
	if !history && s.queued+len(frame) > s.hub.cfg.QueueBytes {
		s.dropLocked(sub)
		sub.next = m.end()
		return
	}
	s.pushSubLocked(sub, frame)
	sub.next = m.end()
}
