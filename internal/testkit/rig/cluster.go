package rig

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// Cluster is one test's rlsched processes: masters, workers, gateways, `up`,
// each with its output files in Dir. Everything it started is killed when
// the test ends, and the test fails if one of them crashed. The methods
// that start a process fail T and so belong to the test's goroutine;
// ServerEnv, MasterEnv, Procs and OnStop are safe from any goroutine.
type Cluster struct {
	T   *testing.T
	Bin string
	// Dir holds the processes' output and data dirs; runs under uids of
	// their own (a worker run as root) can reach the workers' data dirs.
	Dir       string
	JWTSecret string
	JoinToken string
	// Env is added to the environment of every server it starts (see Env).
	Env []string

	mu      sync.Mutex
	procs   []*Proc
	n       int
	cleanup []func()
}

// New prepares t's cluster (skipping t where process tests do not run,
// see Bin); env is added to every server's environment.
func New(t *testing.T, env ...string) *Cluster {
	t.Helper()
	c := &Cluster{T: t, Bin: Bin(t), Dir: testutil.ReachableTempDir(t),
		JWTSecret: "jwt-" + RandHex(16), JoinToken: "join-" + RandHex(16), Env: env}
	t.Cleanup(c.stop)
	return c
}

// ServerEnv is a server's environment: the test's own minus every rlsched
// setting (see ServerEnv), a config dir of the test's own (where `up`
// records its URL for the CLI, not the user's), c.Env, then extra.
func (c *Cluster) ServerEnv(extra ...string) []string {
	env := append([]string{"RLSCHED_CONFIG_DIR=" + filepath.Join(c.Dir, "cli-config")}, c.Env...)
	return ServerEnv(append(env, extra...)...)
}

// Start runs the binary with args and env; name labels its output files
// (NN-name.stdout and .stderr in Dir).
func (c *Cluster) Start(name string, env []string, args ...string) *Proc {
	c.T.Helper()
	return c.StartVia(name, nil, env, args...)
}

// StartVia is Start with the binary run by the command wrap (such as
// `nsenter --net=... --`, which execs it: the process is still the binary's).
func (c *Cluster) StartVia(name string, wrap, env []string, args ...string) *Proc {
	c.T.Helper()
	c.mu.Lock()
	c.n++
	base := filepath.Join(c.Dir, fmt.Sprintf("%02d-%s", c.n, name))
	c.mu.Unlock()
	bin := c.Bin
	if len(wrap) > 0 {
		bin, args = wrap[0], append(append(append([]string(nil), wrap[1:]...), c.Bin), args...)
		if p, err := exec.LookPath(bin); err == nil {
			bin = p
		}
	}
	p, err := Launch(Spec{Name: name, Bin: bin, Args: args, Env: env, Dir: c.Dir,
		OutPath: base + ".stdout", ErrPath: base + ".stderr"})
	if err != nil {
		c.T.Fatal(err)
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p
}

// OnStop registers f to run after every process was killed, before the
// logs of a failed test are shown (e.g. to kill what is left of its runs).
func (c *Cluster) OnStop(f func()) {
	c.mu.Lock()
	c.cleanup = append(c.cleanup, f)
	c.mu.Unlock()
}

// Procs are the processes started so far, in order.
func (c *Cluster) Procs() []*Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Proc(nil), c.procs...)
}

func (c *Cluster) stop() {
	t := c.T
	procs := c.Procs()
	c.mu.Lock()
	hooks := append([]func(){}, c.cleanup...)
	c.mu.Unlock()
	for _, p := range procs {
		if s := p.Stderr(); Crashed(s) {
			t.Errorf("%s crashed or logged a BUG:\n%s", p.Name, Tail(s, 60))
		}
	}
	for i := len(procs) - 1; i >= 0; i-- {
		if p := procs[i]; !p.KillGroup(10 * time.Second) {
			t.Errorf("%s (pid %d) survived SIGKILL", p.Name, p.Pid())
		}
	}
	for _, f := range hooks {
		f()
	}
	if t.Failed() {
		for _, p := range procs {
			t.Logf("---- %s (pid %d, %v) stderr, last lines:\n%s", p.Name, p.Pid(), p.Err(), Tail(p.Stderr(), 80))
		}
	}
}

// MasterOpts are the settings of one `rlsched master`.
type MasterOpts struct {
	DataDir  string // default: Dir/data-<name>
	HTTPPort int    // 0: a free one, kept for a restart
	RPCPort  int    // 0: a free one on each start
	ID       string // --master-id, when set
	Env      []string
}

// Master is a started `rlsched master` (or `up`) with its addresses.
type Master struct {
	*Proc
	URL  string // http://127.0.0.1:port
	RPC  string // 127.0.0.1:port
	Opts MasterOpts
}

// MasterArgs is the command line of a master on loopback.
func MasterArgs(dataDir string, httpPort, rpcPort int, id string) []string {
	args := []string{"master", "--data-dir", dataDir, "--bind", "127.0.0.1",
		"--master-port", strconv.Itoa(httpPort), "--rpc-port", strconv.Itoa(rpcPort)}
	if id != "" {
		args = append(args, "--master-id", id)
	}
	return args
}

// MasterEnv is the environment of a master of c: its secrets, open
// registration (a standalone master's default is REGISTRATION=closed; the
// tests register their users) and no submission limit (on by default; the
// tests submit faster than a person), then extra.
func (c *Cluster) MasterEnv(extra ...string) []string {
	return c.ServerEnv(append([]string{"JWT_SECRET=" + c.JWTSecret, "WORKER_JOIN_TOKEN=" + c.JoinToken,
		"REGISTRATION=open", "RATE_LIMIT_ENABLED=false"}, extra...)...)
}

// StartMaster runs `rlsched master` and waits until it is up.
func (c *Cluster) StartMaster(name string, o MasterOpts) *Master {
	c.T.Helper()
	if o.DataDir == "" {
		o.DataDir = filepath.Join(c.Dir, "data-"+name)
	}
	m := &Master{Opts: o}
	c.startMaster(m, name)
	return m
}

// Restart starts m again, on its data dir and HTTP port; m must have exited.
func (c *Cluster) Restart(m *Master) {
	c.T.Helper()
	name := m.Name
	if !strings.HasSuffix(name, "-again") {
		name += "-again"
	}
	c.startMaster(m, name)
}

func (c *Cluster) startMaster(m *Master, name string) {
	c.T.Helper()
	o := m.Opts
	p := c.Start(name, c.MasterEnv(o.Env...), MasterArgs(o.DataDir, o.HTTPPort, o.RPCPort, o.ID)...)
	*m = *c.AwaitMaster(p)
	m.Opts = o
	if m.Opts.HTTPPort == 0 {
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(m.URL, "http://"))
		m.Opts.HTTPPort, _ = strconv.Atoi(port)
	}
}

// AwaitMaster reads a master's addresses from its "master started" line.
func (c *Cluster) AwaitMaster(p *Proc) *Master {
	c.T.Helper()
	l := p.WaitMessage(c.T, 30*time.Second, "master started")
	m := &Master{Proc: p, URL: l.Str("url"), RPC: l.Str("rpc")}
	if !strings.HasPrefix(m.URL, "http://") || m.RPC == "" {
		c.T.Fatalf("%s: master started without url/rpc: %v", p.Name, l)
	}
	return m
}

// WaitJoined waits for m to log that worker id joined; it returns the line.
func (m *Master) WaitJoined(t testing.TB, id string) Line {
	t.Helper()
	return m.WaitLog(t, 30*time.Second, "worker "+id+" joined", func(l Line) bool {
		return l.Msg() == "worker joined" && l.Str("worker") == id
	})
}

// WorkerArgs is the command line of a worker of the masters at rpc (a
// comma-separated list, the first preferred); gpus < 0 leaves the GPU
// count to detection.
func WorkerArgs(rpc, id string, slots, gpus int, dataDir string) []string {
	args := []string{"worker", "--master", rpc, "--id", id, "--slots", strconv.Itoa(slots), "--data-dir", dataDir}
	if gpus >= 0 {
		args = append(args, "--gpus", strconv.Itoa(gpus))
	}
	return args
}

// WorkerOpts are the settings of one `rlsched worker`.
type WorkerOpts struct {
	ID    string // default: the name
	Slots int    // CPU slots; default 2
	GPUs  int    // synthetic GPUs; < 0: detected
	// Token is its join token; default: the cluster's.
	Token string
	Env   []string
}

// StartWorker runs `rlsched worker` of the masters at rpc, with a data dir
// of its own (Dir/worker-<id>).
func (c *Cluster) StartWorker(name, rpc string, o WorkerOpts) *Proc {
	c.T.Helper()
	if o.ID == "" {
		o.ID = name
	}
	if o.Slots == 0 {
		o.Slots = 2
	}
	if o.Token == "" {
		o.Token = c.JoinToken
	}
	env := c.ServerEnv(append([]string{"WORKER_JOIN_TOKEN=" + o.Token}, o.Env...)...)
	return c.Start(name, env, WorkerArgs(rpc, o.ID, o.Slots, o.GPUs, filepath.Join(c.Dir, "worker-"+o.ID))...)
}

// Gateway is a started `rlsched gateway`.
type Gateway struct {
	*Proc
	URL string
}

// StartGateway runs `rlsched gateway` on a free port, with args after the
// defaults, and waits until it is up.
func (c *Cluster) StartGateway(name string, env []string, args ...string) *Gateway {
	c.T.Helper()
	args = append([]string{"gateway", "--bind", "127.0.0.1", "--gateway-port", "0", "--health-interval-ms", "300"}, args...)
	p := c.Start(name, c.ServerEnv(env...), args...)
	l := p.WaitMessage(c.T, 30*time.Second, "gateway started")
	return &Gateway{Proc: p, URL: l.Str("url")}
}
