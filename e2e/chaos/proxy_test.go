package chaos

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// linkState is what a link does with bytes.
type linkState int

const (
	linkOpen      linkState = iota // forwards both ways
	linkCut                        // resets every connection and refuses new ones
	linkBlackhole                  // forwards nothing and answers nothing, like a dead route
)

// link is a TCP proxy on loopback between one worker and one master's RPC
// port, so the test can partition them without iptables. A cut resets
// every connection (the worker notices at once); a black hole holds every
// byte and every new connection without answering (the worker notices only
// by its timeouts), and on heal the held bytes flow on, as after a route
// came back. The master may be restarted behind a link: each connection
// dials the target anew.
type link struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cond   *sync.Cond // broadcast on every change of state or closed
	state  linkState
	closed bool
	conns  map[net.Conn]struct{} // both ends of every live connection
	wg     sync.WaitGroup
}

func newLink(t testing.TB, target string) *link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("cannot listen for a proxy: %v", err)
	}
	l := &link{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	l.cond = sync.NewCond(&l.mu)
	l.wg.Add(1)
	go l.accept()
	t.Cleanup(l.close)
	return l
}

// Addr is where the worker connects instead of the master.
func (l *link) Addr() string { return l.ln.Addr().String() }

func (l *link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return // closed
		}
		l.wg.Add(1)
		go l.serve(c)
	}
}

// serve forwards one connection, once the link lets it through.
func (l *link) serve(c net.Conn) {
	defer l.wg.Done()
	l.mu.Lock()
	for l.state == linkBlackhole && !l.closed {
		l.cond.Wait() // a SYN into a dead route: held until it heals
	}
	refused := l.state == linkCut || l.closed
	l.mu.Unlock()
	if refused {
		resetConn(c)
		return
	}
	up, err := net.DialTimeout("tcp", l.target, 5*time.Second)
	if err != nil {
		resetConn(c) // the master is down: as if nothing listened
		return
	}
	l.mu.Lock()
	if l.state != linkOpen || l.closed {
		l.mu.Unlock()
		resetConn(c)
		resetConn(up)
		return
	}
	l.conns[c], l.conns[up] = struct{}{}, struct{}{}
	l.mu.Unlock()
	var left atomic.Int32 // directions still copying
	left.Store(2)
	end := func() {
		if left.Add(-1) > 0 {
			return
		}
		_ = c.Close()
		_ = up.Close()
		l.mu.Lock()
		delete(l.conns, c)
		delete(l.conns, up)
		l.mu.Unlock()
	}
	l.wg.Add(2)
	go l.pipe(up, c, end)
	go l.pipe(c, up, end)
}

// pipe copies src to dst; every chunk read waits while the link is a black
// hole, and is dropped when it was cut meanwhile. When src ends (or dst
// refuses), only this direction ends, with a FIN after every byte it
// carried, as TCP would: bytes the other side sent before it closed still
// arrive, even when they were held in a black hole.
func (l *link) pipe(dst, src net.Conn, end func()) {
	defer l.wg.Done()
	defer end()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !l.pass(src) {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	if tc, ok := src.(*net.TCPConn); ok {
		_ = tc.CloseRead()
	}
}

// pass waits while the link is a black hole and reports whether c may
// still carry bytes (not cut, not closed).
func (l *link) pass(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.state == linkBlackhole && !l.closed {
		l.cond.Wait()
	}
	_, live := l.conns[c]
	return live && l.state == linkOpen && !l.closed
}

// set changes the state; a cut resets every live connection.
func (l *link) set(s linkState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state = s
	if s == linkCut {
		l.resetAllLocked()
	}
	l.cond.Broadcast()
}

func (l *link) resetAllLocked() {
	for c := range l.conns {
		resetConn(c)
		delete(l.conns, c)
	}
}

// resetConn closes c with an RST rather than a FIN, like a peer that
// vanished (a FIN could read as an orderly goodbye).
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// live is the number of connections forwarded now.
func (l *link) live() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns) / 2
}

func (l *link) close() {
	_ = l.ln.Close()
	l.mu.Lock()
	l.closed = true
	l.resetAllLocked()
	l.cond.Broadcast()
	l.mu.Unlock()
	l.wg.Wait()
}
