package e2e

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// cutProxy is a TCP proxy between workers and a master's RPC port that can
// partition them: Cut closes every connection through it and refuses new
// ones (accepted, then closed at once) until Heal. The processes on both
// sides keep running, as they would behind a broken switch.
type cutProxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	cuts   int // connections closed by Cut or refused while cut
	closed bool
	wg     sync.WaitGroup
}

// newCutProxy listens on a free local port and forwards to target.
func newCutProxy(t testing.TB, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{t: t, ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is where workers should connect instead of the master.
func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.t.Logf("proxy: accept: %v", err)
			}
			return
		}
		p.mu.Lock()
		if p.cut || p.closed {
			p.cuts++
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.mu.Unlock()
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, up) {
			continue
		}
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

// track registers both ends of a new connection, unless a Cut came first.
func (p *cutProxy) track(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut || p.closed {
		p.cuts++
		_ = c.Close()
		_ = up.Close()
		return false
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	return true
}

// pipe copies one direction; when either side ends, both ends close.
func (p *cutProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// Cut closes every live connection and refuses new ones until Heal; it
// returns how many connection ends it closed.
func (p *cutProxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	n := len(p.conns)
	for c := range p.conns {
		// SetLinger(0): an RST, like a peer that vanished, rather than an
		// orderly FIN the other side might read as a goodbye.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
	p.cuts += n
	return n
}

// Heal accepts and forwards connections again.
func (p *cutProxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// live is the number of connections currently forwarded.
func (p *cutProxy) live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

func (p *cutProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
