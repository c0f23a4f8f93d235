package logpipe

// The credit window of a worker connection (HelloAck and LogAck
// log_window) is computed here and nowhere else: the master grants it, the
// worker keeps to it (docs/protocol.md, "Credit window").

// Credit windows (LogAck.log_window): bounds of what one connection may have
// sent and not yet acked.
const (
	// MaxLogWindow is the most a connection is granted however few send
	// (the worker's own bound and its default for a master that grants
	// none are the same 4 MiB).
	MaxLogWindow = 4 << 20
	// MinLogWindow is one largest LogData payload.
	MinLogWindow = 64 << 10
)

// AddSender counts a connection that sends output (+1), or one that went
// away (-1), for LogWindow. Safe from any goroutine.
func (w *Writer) AddSender(delta int) { w.senders.Add(int64(delta)) }

// AddConn counts a worker connection (+1) or one that closed (-1), for
// HelloWindow. Safe from any goroutine.
func (w *Writer) AddConn(delta int) { w.conns.Add(int64(delta)) }

// LogWindow is the credit window to grant each connection now: the queue's
// bytes shared by the connections sending output, so that together they
// cannot have more in flight than the queue takes and "busy" refusals stay
// rare however many workers stream; never below one largest frame nor above
// the worker's default. Safe from any goroutine.
func (w *Writer) LogWindow() uint32 { return w.window(w.senders.Load()) }

// HelloWindow is the window of a connection that just joined: shared by
// every connection, as any may start sending, and at most helloWindowMax,
// so that a fleet of workers that join together and then all stream cannot
// swamp the queue before their first acks carry LogWindow. Safe from any
// goroutine.
func (w *Writer) HelloWindow() uint32 {
	return min(w.window(max(w.conns.Load(), w.senders.Load())), helloWindowMax)
}

// helloWindowMax: a worker's first acks, a few batches later, raise it.
const helloWindowMax = 1 << 20

func (w *Writer) window(n int64) uint32 {
	return uint32(min(max(w.cfg.QueueBytes/max(n, 1), MinLogWindow), MaxLogWindow))
}
