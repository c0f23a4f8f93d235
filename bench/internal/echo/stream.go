package echo

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Stream is the one-way loopback reference: conns TCP connections each
// write block over and over for d into a server that reads and discards
// (a goroutine per connection, 256 KiB reads). It returns the bytes per
// second the server read: what loopback TCP moves on this machine with no
// protocol work at all.
func Stream(conns int, block []byte, d time.Duration) (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	var read atomic.Int64
	var measuring atomic.Bool
	var srv sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			srv.Go(func() {
				defer c.Close()
				buf := make([]byte, 256<<10)
				for {
					n, err := c.Read(buf)
					if measuring.Load() {
						read.Add(int64(n))
					}
					if err != nil {
						return
					}
				}
			})
		}
	}()
	cs := make([]net.Conn, 0, conns)
	defer func() {
		for _, c := range cs {
			c.Close()
		}
		srv.Wait()
	}()
	for range conns {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return 0, err
		}
		cs = append(cs, c)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var werr atomic.Value
	for _, c := range cs {
		wg.Go(func() {
			for !stop.Load() {
				if _, err := c.Write(block); err != nil {
					if !stop.Load() && !errors.Is(err, io.EOF) {
						werr.CompareAndSwap(nil, err)
					}
					return
				}
			}
		})
	}
	time.Sleep(d / 5) // warm-up: every writer running
	measuring.Store(true)
	start := time.Now()
	time.Sleep(d)
	measuring.Store(false)
	el := time.Since(start)
	stop.Store(true)
	for _, c := range cs {
		_ = c.SetWriteDeadline(time.Now())
	}
	wg.Wait()
	if err, _ := werr.Load().(error); err != nil && !errors.Is(err, net.ErrClosed) {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return 0, err
		}
	}
	return float64(read.Load()) / el.Seconds(), nil
}
