// Package echo is the raw loopback TCP reference: a gnet server that sends
// every byte back, and a closed-loop ping-pong client. Together they measure
// what loopback TCP itself costs on this machine, with no protocol work.
package echo

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/rlsched/rlsched/bench/internal/hist"
)

type server struct {
	gnet.BuiltinEventEngine
	addr  chan string
	conns atomic.Int64
}

func (s *server) OnBoot(eng gnet.Engine) gnet.Action { return gnet.None }

func (s *server) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	s.conns.Add(1)
	return nil, gnet.None
}

func (s *server) OnClose(c gnet.Conn, _ error) gnet.Action {
	s.conns.Add(-1)
	return gnet.None
}

func (s *server) OnTraffic(c gnet.Conn) gnet.Action {
	b, _ := c.Next(-1)
	_, _ = c.Write(b)
	return gnet.None
}

// Serve runs an echo server on addr (host:port) with as many event loops as
// cores, the way the master runs its RPC server. It blocks.
func Serve(addr string) error {
	return gnet.Run(&server{}, "tcp://"+addr, gnet.WithMulticore(true), gnet.WithReuseAddr(true),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay), gnet.WithLogger(quiet{}))
}

type quiet struct{}

func (quiet) Debugf(string, ...any) {}
func (quiet) Infof(string, ...any)  {}
func (quiet) Warnf(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}
func (quiet) Fatalf(string, ...any) {}

// PingPong runs conns connections, each sending a size-byte message and
// waiting for its echo, for d. It returns round trips per second and the
// round-trip latency histogram.
func PingPong(addr string, conns, size int, d time.Duration) (float64, *hist.Hist, error) {
	var h hist.Hist
	var total atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, conns)
	start := time.Now()
	stop := start.Add(d)
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return 0, nil, fmt.Errorf("cannot dial echo server: %w", err)
		}
		wg.Go(func() {
			defer c.Close()
			out := make([]byte, size)
			in := make([]byte, size)
			n := int64(0)
			for {
				t := time.Now()
				if t.After(stop) {
					break
				}
				if _, err := c.Write(out); err != nil {
					errc <- err
					return
				}
				if _, err := io.ReadFull(c, in); err != nil {
					errc <- err
					return
				}
				h.Add(int64(time.Since(t)))
				n++
			}
			total.Add(n)
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return 0, nil, err
	}
	return float64(total.Load()) / time.Since(start).Seconds(), &h, nil
}
