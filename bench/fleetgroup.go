package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/rlsched/rlsched/bench/fleet"
	"github.com/rlsched/rlsched/bench/internal/hist"
)

// perChild bounds the connections of one fleet process: well under its
// open-file limit (20,000 here) and one loopback address's ephemeral ports.
const perChild = 4000

// fleetOpts shape the simulated workers of a scenario.
type fleetOpts struct {
	N          int
	Prefix     string
	Slots      int
	Raw        bool
	RawEvery   time.Duration
	RunFor     time.Duration
	LogLines   int
	RecordExec bool
	Dialers    int
	Reconnect  bool
	// GPUs per worker, and every how many heartbeats one carries a GPU
	// sample (fleet.Config.GPUSampleEvery).
	GPUs, GPUSampleEvery int
	// What the workers say of themselves (fleet.Config's fields of the
	// same names), and RunForArgv: a run of "sleep S" lasts S.
	GPUName     string
	GPUMemoryMB int64
	CPUMillis   int64
	MemoryMB    int64
	Labels      map[string]string
	RunForArgv  bool
}

// fleetGroup is a simulated farm spread over helper processes, each with
// its own loopback source address.
type fleetGroup struct {
	kids []*child
	n    int
}

func (e *env) startFleet(addr, token string, o fleetOpts) (*fleetGroup, error) {
	k := (o.N + perChild - 1) / perChild
	g := &fleetGroup{n: o.N}
	for i := 0; i < k; i++ {
		n := o.N / k
		if i < o.N%k {
			n++
		}
		first := i*(o.N/k) + min(i, o.N%k)
		cfg := fleet.Config{Addr: addr, N: n, First: first, Prefix: o.Prefix, LocalIP: e.localIP(), Token: token,
			Slots: o.Slots, Raw: o.Raw, RawInterval: o.RawEvery, RunFor: o.RunFor, LogLines: o.LogLines,
			RecordExec: o.RecordExec, Dialers: o.Dialers, Reconnect: o.Reconnect, GPUs: o.GPUs, GPUSampleEvery: o.GPUSampleEvery,
			GPUName: o.GPUName, GPUMemoryMB: o.GPUMemoryMB, CPUMillis: o.CPUMillis, MemoryMB: o.MemoryMB, Labels: o.Labels, RunForArgv: o.RunForArgv}
		c, err := e.startChild("fleet", cfg)
		if err != nil {
			g.stop()
			return nil, err
		}
		g.kids = append(g.kids, c)
	}
	return g, nil
}

// each runs f on every child concurrently and returns the first error.
func (g *fleetGroup) each(f func(i int, c *child) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(g.kids))
	for i, c := range g.kids {
		wg.Go(func() { errs[i] = f(i, c) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// connect dials every worker (to addr, or the configured address when
// empty) and returns how many joined and when the last one did.
func (g *fleetGroup) connect(addr string, timeout time.Duration) (int64, error) {
	var mu sync.Mutex
	var joined int64
	err := g.each(func(_ int, c *child) error {
		a, err := c.call(command{Op: "connect", Addr: addr, Timeout: timeout})
		mu.Lock()
		joined += a.Joined
		mu.Unlock()
		return err
	})
	return joined, err
}

// stats merges the counters of every child.
type groupStats struct {
	fleet.Stats
	rtt hist.Hist
}

func (g *fleetGroup) stats() (*groupStats, error) {
	var mu sync.Mutex
	out := &groupStats{}
	err := g.each(func(_ int, c *child) error {
		a, err := c.call(command{Op: "stats"})
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		mergeStats(out, a.Stats)
		return nil
	})
	return out, err
}

func mergeStats(out *groupStats, s *fleet.Stats) {
	if s == nil {
		return
	}
	o := &out.Stats
	o.Connected += s.Connected
	o.Joined += s.Joined
	o.DialErrors += s.DialErrors
	o.Refused += s.Refused
	o.Closed += s.Closed
	o.Redials += s.Redials
	o.HBSent += s.HBSent
	o.HBAcked += s.HBAcked
	o.Execs += s.Execs
	o.Finished += s.Finished
	o.LogAcks += s.LogAcks
	if s.FirstExecNs != 0 && (o.FirstExecNs == 0 || s.FirstExecNs < o.FirstExecNs) {
		o.FirstExecNs = s.FirstExecNs
	}
	o.LastFinishNs = max(o.LastFinishNs, s.LastFinishNs)
	o.LastJoinNs = max(o.LastJoinNs, s.LastJoinNs)
	if s.LastRefusal != "" {
		o.LastRefusal = s.LastRefusal
	}
	o.Overcommits += s.Overcommits
	if s.LastOvercommit != "" {
		o.LastOvercommit = s.LastOvercommit
	}
	out.rtt.Merge(s.RTT)
}

func (g *fleetGroup) reset() error {
	return g.each(func(_ int, c *child) error { _, err := c.call(command{Op: "reset"}); return err })
}

func (g *fleetGroup) execs() ([]fleet.Exec, error) {
	var mu sync.Mutex
	var all []fleet.Exec
	err := g.each(func(_ int, c *child) error {
		a, err := c.call(command{Op: "execs"})
		mu.Lock()
		all = append(all, a.Execs...)
		mu.Unlock()
		return err
	})
	return all, err
}

// waitClosed waits until the peer closed every connection.
func (g *fleetGroup) waitClosed(timeout time.Duration) error {
	return g.each(func(_ int, c *child) error {
		a, err := c.call(command{Op: "wait-closed", Timeout: timeout})
		if err == nil && a.Stats != nil && a.Stats.Connected > 0 {
			return fmt.Errorf("%d connections still open after %v", a.Stats.Connected, timeout)
		}
		return err
	})
}

func (g *fleetGroup) pids() []int {
	var out []int
	for _, c := range g.kids {
		out = append(out, c.pid())
	}
	return out
}

func (g *fleetGroup) stop() {
	_ = g.each(func(_ int, c *child) error { c.stop(); return nil })
}

// waitFinished polls until the fleet acknowledged want finished runs (since
// the last reset) or timeout passes.
func (g *fleetGroup) waitFinished(want int64, timeout time.Duration) (*groupStats, error) {
	deadline := time.Now().Add(timeout)
	for {
		s, err := g.stats()
		if err != nil {
			return nil, err
		}
		if s.Finished >= want {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("only %d of %d runs finished within %v (refusals: %d %s)",
				s.Finished, want, timeout, s.Refused, s.LastRefusal)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
