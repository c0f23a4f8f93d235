// Package linger makes a server's early refusal readable. A client that
// sends a body over the limit is usually still sending when the server has
// answered 413 and closes; closing a socket with unread data makes the
// kernel send a reset, and the reset destroys the answer the client has not
// read yet (RFC 9112, 9.6). A connection armed here is half-closed instead,
// and what the client still sends is read and dropped, up to a cap and a
// deadline, before the socket closes.
//
// The master and the gateway wrap their listeners with it and arm a
// connection from their error handler. It never reads what it drops, and
// never holds a connection longer than Wait.
package linger

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// Defaults of a Listener.
const (
	DefaultMax  = 16 << 20
	DefaultWait = 3 * time.Second
)

// Listener wraps the connections of a net.Listener so that Arm works on
// them. Max bytes (default DefaultMax) are dropped at most, for at most Wait
// (default DefaultWait).
type Listener struct {
	net.Listener
	Max  int64
	Wait time.Duration
}

// Accept returns the next connection, wrapped.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	max, wait := l.Max, l.Wait
	if max <= 0 {
		max = DefaultMax
	}
	if wait <= 0 {
		wait = DefaultWait
	}
	return &Conn{Conn: c, max: max, wait: wait}, nil
}

// Conn is a connection of a Listener. Its methods are safe to call from any
// goroutine, as net.Conn's are.
type Conn struct {
	net.Conn
	max   int64
	wait  time.Duration
	armed atomic.Bool
}

// Arm makes the next Close of c linger, when c is a Conn of a Listener (it
// reports whether it was).
func Arm(c net.Conn) bool {
	lc, ok := c.(*Conn)
	if ok {
		lc.armed.Store(true)
	}
	return ok
}

// Close closes the connection; an armed one first half-closes it and drops
// what the peer still sends, until the peer closes, Max bytes or Wait.
func (c *Conn) Close() error {
	if c.armed.Swap(false) {
		if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			_ = c.Conn.SetReadDeadline(time.Now().Add(c.wait))
			_, _ = io.CopyN(io.Discard, c.Conn, c.max)
		}
	}
	return c.Conn.Close()
}

// CloseWrite half-closes the connection when the one inside can.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
