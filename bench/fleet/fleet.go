// Package fleet simulates many rlsched workers in one process. Each worker is
// one real TCP connection speaking the real protocol (codec frames,
// Challenge → Hello sealed with the worker's key → HelloAck, every frame
// after it sealed, heartbeats, ExecuteTask → TaskStarted → LogData →
// TaskFinished), multiplexed on a few
// gnet client event loops: there is no goroutine per connection. A simulated
// executor "runs" each run for a fixed time and can emit log and metric lines.
//
// One timer goroutine (a min-heap) wakes connections when a heartbeat or the
// end of a run is due; everything a connection owns is touched only on its
// event loop. Dialing uses a bounded pool of goroutines that exit once the
// connection is handed to gnet.
package fleet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/rlsched/rlsched/bench/internal/hist"
	"github.com/rlsched/rlsched/codec"
)

// Config of a fleet.
type Config struct {
	Addr    string // master RPC address
	N       int    // workers (connections)
	First   int    // index of the first worker; ids are Prefix-%06d
	Prefix  string
	LocalIP string // source address of the connections ("" = any)
	Token   string // join token
	Slots   int    // CPU slots offered by each worker
	GPUs    int    // synthetic GPUs offered by each worker
	// GPUSampleEvery: every Nth heartbeat carries a GPU sample of the GPUs
	// (utilisation and memory, as a worker sampling every N intervals
	// sends); 0: none.
	GPUSampleEvery int
	// Raw mode speaks no handshake: the peer is an echo server, each
	// Heartbeat frame comes back unchanged and counts as its ack.
	Raw         bool
	RawInterval time.Duration
	RunFor      time.Duration // how long a simulated run lasts
	LogLines    int           // output lines per run (every other one a metric line)
	Loops       int           // gnet event loops; default 2
	Dialers     int           // concurrent dials; default 256
	RecordExec  bool          // remember when each ExecuteTask arrived
	// Reconnect redials a connection the peer closed, with the real
	// agent's backoff (100 ms doubling to 5 s, ±20%, back to 100 ms after a
	// session of at least 5 s).
	Reconnect bool
	// LogStream makes every run a log streamer (see Stream) that never
	// exits on its own; LogWindow is the credit window of unacked output
	// bytes per connection (default the real worker's 4 MiB).
	LogStream bool
	LogWindow int
	// What each worker says of itself in its Hello (issue 28): its GPUs'
	// name and memory (default "SimGPU", 81,920 MiB), the cores (in
	// thousandths) and memory it offers runs (0: not reported, which the
	// master reads as unlimited) and its labels, beside the automatic ones
	// the real worker adds (gpu.type when GPUName is set, gpu.count,
	// cpu.count when CPUMillis is, host).
	GPUName     string
	GPUMemoryMB int64
	CPUMillis   int64
	MemoryMB    int64
	Labels      map[string]string
	// RunForArgv: a run whose argv is "sleep SECONDS" lasts that long
	// (fractions allowed) instead of RunFor.
	RunForArgv bool
}

// Stats are counters since the last Reset (Connected and Joined are levels).
type Stats struct {
	Connected    int64       `json:"connected"`
	Joined       int64       `json:"joined"`
	DialErrors   int64       `json:"dialErrors"`
	Refused      int64       `json:"refused"`
	Closed       int64       `json:"closed"`
	Redials      int64       `json:"redials"`
	HBSent       int64       `json:"hbSent"`
	HBAcked      int64       `json:"hbAcked"`
	Execs        int64       `json:"execs"`
	Finished     int64       `json:"finished"`
	LogAcks      int64       `json:"logAcks"`
	FirstExecNs  int64       `json:"firstExecNs"`
	LastFinishNs int64       `json:"lastFinishNs"`
	LastJoinNs   int64       `json:"lastJoinNs"`
	RTT          hist.Sparse `json:"rtt"`
	LastRefusal  string      `json:"lastRefusal,omitempty"`
	// Log streaming (Config.LogStream), in lines of LineBytes.
	LogLines  int64 `json:"logLines,omitempty"`  // written by the simulated runs
	LogAcked  int64 `json:"logAcked,omitempty"`  // acked by the master (in its files)
	LogFrames int64 `json:"logFrames,omitempty"` // LogData frames sent, resends included
	LogBusy   int64 `json:"logBusy,omitempty"`   // LogAcks "busy"
	LogGaps   int64 `json:"logGaps,omitempty"`
	LogFenced int64 `json:"logFenced,omitempty"`
	LogErrors int64 `json:"logErrors,omitempty"`
	// ExecuteTasks that would over-commit a GPU of the worker given the
	// runs it holds and has not reported ended: a whole-GPU run on a GPU
	// any run holds, a share on a GPU held whole, shares above the whole
	// GPU or their memory above the GPU's. The run is simulated anyway.
	Overcommits    int64  `json:"overcommits,omitempty"`
	LastOvercommit string `json:"lastOvercommit,omitempty"`
}

// Exec is the arrival of one ExecuteTask.
type Exec struct {
	TaskID string `json:"id"`
	AtNs   int64  `json:"at"`
}

// Fleet is a set of simulated workers. Its exported methods are safe for
// concurrent use.
type Fleet struct {
	cfg     Config
	cli     *gnet.Client
	workers []*worker
	tm      timers

	connected, joined, dialErrors, refused, closed atomic.Int64
	redials                                        atomic.Int64
	addr                                           atomic.Value // string: where Connect dialed last
	closing                                        atomic.Bool  // CloseAll or Stop: no redials
	hbSent, hbAcked, execs, finished, logAcks      atomic.Int64
	overcommits                                    atomic.Int64
	firstExec, lastFinish, lastJoin                atomic.Int64
	rtt                                            hist.Hist
	streamCounters

	mu          sync.Mutex
	conns       []gnet.Conn // by worker index; nil while disconnected
	execLog     []Exec
	lastRefusal string
	lastOver    string
}

// New starts the event loops and the timer of a fleet; Connect dials.
func New(cfg Config) (*Fleet, error) {
	if cfg.Loops <= 0 {
		cfg.Loops = 2
	}
	if cfg.Dialers <= 0 {
		cfg.Dialers = 256
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "sim"
	}
	if cfg.GPUMemoryMB <= 0 {
		cfg.GPUMemoryMB = 81920
	}
	f := &Fleet{cfg: cfg, conns: make([]gnet.Conn, cfg.N)}
	f.firstExec.Store(0)
	for i := 0; i < cfg.N; i++ {
		id := fmt.Sprintf("%s-%06d", cfg.Prefix, cfg.First+i)
		f.workers = append(f.workers, &worker{f: f, idx: i, id: id, key: codec.WorkerKey([]byte(cfg.Token), id)})
	}
	cli, err := gnet.NewClient(&handler{f: f}, gnet.WithMulticore(true), gnet.WithNumEventLoop(cfg.Loops),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay), gnet.WithReadBufferCap(64<<10), gnet.WithLogger(quietLogger{}))
	if err != nil {
		return nil, fmt.Errorf("cannot create gnet client: %w", err)
	}
	if err := cli.Start(); err != nil {
		return nil, fmt.Errorf("cannot start gnet client: %w", err)
	}
	f.cli = cli
	f.tm.init()
	go f.tm.run(f)
	return f, nil
}

// Connect dials every worker that is not connected to addr (Config.Addr when
// empty) and waits until all of them joined (HelloAck received; in raw mode,
// connected) or timeout passes. It returns the number joined.
func (f *Fleet) Connect(addr string, timeout time.Duration) int64 {
	if addr == "" {
		addr = f.cfg.Addr
	}
	f.addr.Store(addr)
	f.closing.Store(false)
	deadline := time.Now().Add(timeout)
	work := make(chan *worker, len(f.workers))
	f.mu.Lock()
	for i, w := range f.workers {
		if f.conns[i] == nil {
			work <- w
		}
	}
	f.mu.Unlock()
	close(work)
	var wg sync.WaitGroup
	for range f.cfg.Dialers {
		wg.Go(func() {
			for w := range work {
				f.dial(w, addr, deadline)
			}
		})
	}
	wg.Wait()
	for time.Now().Before(deadline) && f.joined.Load() < int64(len(f.workers)) {
		time.Sleep(time.Millisecond)
	}
	return f.joined.Load()
}

func (f *Fleet) dial(w *worker, addr string, deadline time.Time) {
	d := net.Dialer{Timeout: 10 * time.Second}
	if f.cfg.LocalIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(f.cfg.LocalIP)}
	}
	backoff := 10 * time.Millisecond
	for time.Now().Before(deadline) {
		c, err := d.Dial("tcp", addr)
		if err == nil {
			if _, err = f.cli.EnrollContext(c, w); err == nil {
				return
			}
		}
		f.dialErrors.Add(1)
		time.Sleep(backoff + rand.N(backoff))
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// redial reconnects w after its backoff, as the real agent does. It runs on
// a goroutine of its own that ends once the connection is handed to gnet.
func (f *Fleet) redial(w *worker, delay time.Duration) {
	time.Sleep(delay)
	if f.closing.Load() {
		return
	}
	addr, _ := f.addr.Load().(string)
	if addr == "" {
		addr = f.cfg.Addr
	}
	f.redials.Add(1)
	f.dial(w, addr, time.Now().Add(time.Minute))
}

// CloseAll closes every connection and waits (up to timeout) until gnet
// reported every close.
func (f *Fleet) CloseAll(timeout time.Duration) {
	f.closing.Store(true)
	f.mu.Lock()
	for _, c := range f.conns {
		if c != nil {
			_ = c.Close()
		}
	}
	f.mu.Unlock()
	WaitFor(timeout, func() bool { return f.connected.Load() == 0 })
}

// WaitFor polls cond every millisecond until it holds or timeout passes.
func WaitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// Stats returns the counters.
func (f *Fleet) Stats() Stats {
	f.mu.Lock()
	refusal, over := f.lastRefusal, f.lastOver
	f.mu.Unlock()
	return Stats{
		Connected: f.connected.Load(), Joined: f.joined.Load(), DialErrors: f.dialErrors.Load(),
		Refused: f.refused.Load(), Closed: f.closed.Load(), Redials: f.redials.Load(), HBSent: f.hbSent.Load(), HBAcked: f.hbAcked.Load(),
		Execs: f.execs.Load(), Finished: f.finished.Load(), LogAcks: f.logAcks.Load(),
		FirstExecNs: f.firstExec.Load(), LastFinishNs: f.lastFinish.Load(), LastJoinNs: f.lastJoin.Load(),
		RTT: f.rtt.Snapshot(), LastRefusal: refusal,
		LogLines: f.logLines.Load(), LogAcked: f.logAcked.Load(), LogFrames: f.logFrames.Load(), LogBusy: f.logBusy.Load(),
		LogGaps: f.logGaps.Load(), LogFenced: f.logFenced.Load(), LogErrors: f.logErrors.Load(),
		Overcommits: f.overcommits.Load(), LastOvercommit: over,
	}
}

// Reset zeroes the counters (not the levels Connected and Joined).
func (f *Fleet) Reset() {
	for _, c := range []*atomic.Int64{&f.dialErrors, &f.refused, &f.closed, &f.redials, &f.hbSent, &f.hbAcked,
		&f.execs, &f.finished, &f.logAcks, &f.firstExec, &f.lastFinish, &f.lastJoin,
		&f.logLines, &f.logAcked, &f.logFrames, &f.logBusy, &f.logGaps, &f.logFenced, &f.logErrors, &f.overcommits} {
		c.Store(0)
	}
	f.rtt.Reset()
	f.mu.Lock()
	f.execLog = nil
	f.lastOver = ""
	f.mu.Unlock()
}

// Execs returns the recorded ExecuteTask arrivals (Config.RecordExec).
func (f *Fleet) Execs() []Exec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Exec(nil), f.execLog...)
}

// Stop closes everything.
func (f *Fleet) Stop() {
	f.closing.Store(true)
	f.tm.stop()
	_ = f.cli.Stop()
}

func storeMin(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if old != 0 && old <= v {
			return
		}
		if a.CompareAndSwap(old, v) {
			return
		}
	}
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if old >= v {
			return
		}
		if a.CompareAndSwap(old, v) {
			return
		}
	}
}

type quietLogger struct{}

func (quietLogger) Debugf(string, ...any) {}
func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Warnf(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(string, ...any) {}
