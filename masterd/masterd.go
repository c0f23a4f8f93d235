// Package masterd composes a master from a Config: it opens the durable
// store and the lease backend, stacks the store's decorators, and starts
// the log pipe, the live hub, the cluster node, the dispatcher and the REST
// server, and stops them in the reverse order. cmd/rlsched only parses
// flags into a Config; `rlsched up`, `rlsched master` and the tests start a
// master the same way.
//
// What it must never do: hold logic of a room (placement, logs, REST): it
// only builds the rooms and connects them, in the order written here.
package masterd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/artifact/disk"
	"github.com/rlsched/rlsched/artifact/s3"
	"github.com/rlsched/rlsched/artifactpipe"
	"github.com/rlsched/rlsched/cluster"
	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codetree"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/depctl"
	"github.com/rlsched/rlsched/dispatch"
	"github.com/rlsched/rlsched/dispatch/gpuwatch"
	"github.com/rlsched/rlsched/gateway/discovery"
	"github.com/rlsched/rlsched/httpapi"
	"github.com/rlsched/rlsched/internal/obs"
	"github.com/rlsched/rlsched/internal/rediskey"
	"github.com/rlsched/rlsched/lease"
	"github.com/rlsched/rlsched/lease/memory"
	"github.com/rlsched/rlsched/lease/redis"
	"github.com/rlsched/rlsched/live"
	"github.com/rlsched/rlsched/logpipe"
	"github.com/rlsched/rlsched/notify"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/mysql"
	"github.com/rlsched/rlsched/store/sqlite"
	"github.com/rlsched/rlsched/sweepctl"
)

// Config is the settings of a master. cmd/rlsched binds one flag (and
// environment variable) to each field; zero values get the defaults named.
type Config struct {
	DataDir    string // RLSCHED_DATA_DIR: the database, logs and outputs; created private (mode 0700, private.go)
	Bind       string // RLSCHED_BIND: the address REST listens on
	RPCBind    string // RLSCHED_RPC_BIND: the address the workers' RPC listens on; default Bind
	MasterPort int    // MASTER_PORT: REST and WebSocket (0: a free port)
	RPCPort    int    // RPC_PORT: the workers' RPC (0: a free port)
	SQLitePath string // SQLITE_PATH; default DataDir/rlsched.db
	LogDir     string // LOG_DIR; default DataDir/logs. Several masters share one.
	// ArtifactDir (ARTIFACT_DIR; default DataDir/artifacts, mode 0700)
	// holds the runs' output files, unless ArtifactS3.Endpoint is set
	// (ARTIFACT_S3_*): then they go to that bucket. Several masters share
	// one of the two.
	ArtifactDir string
	ArtifactS3  s3.Config
	// ArtifactMaxFileBytes (ARTIFACT_MAX_FILE_BYTES, default 4 GiB) and
	// ArtifactMaxRunBytes (ARTIFACT_MAX_RUN_BYTES, default 10 GiB) bound
	// what a run keeps; < 0: no bound.
	ArtifactMaxFileBytes, ArtifactMaxRunBytes int64
	// ArtifactMaxMBPerUser (ARTIFACT_MAX_MB_PER_USER) bounds, in MiB, what
	// all of one user's runs keep, and ArtifactMaxMB (ARTIFACT_MAX_MB)
	// what every run keeps; 0: no bound.
	ArtifactMaxMBPerUser, ArtifactMaxMB int64

	MySQLDSN    string // MYSQL_DSN: the store is MySQL when set, else SQLite
	RedisAddr   string // REDIS_ADDR: leases in Redis and a cluster member when set, else in memory and alone
	RedisPrefix string // REDIS_PREFIX: every Redis key's prefix; default rlsched

	HeartbeatTTL time.Duration // WORKER_HB_TTL_SECONDS: a worker silent this long is gone; it beats every third of it (default 30 s)
	TaskTTL      time.Duration // WORKER_TASK_TTL_SECONDS: the run lease (default 2 min)
	CancelGrace  time.Duration // RLSCHED_CANCEL_GRACE_SECONDS: SIGTERM to SIGKILL on cancel (default 10 s)
	MasterID     string        // RLSCHED_MASTER_ID; default host-rpcport (host-random with a free port)
	// PublicHosts (PUBLIC_HOSTS) are more names the REST API answers to
	// besides localhost and the bound address (DNS rebinding; httpapi).
	PublicHosts []string
	// Registration (REGISTRATION) is who may register: open (the default
	// here; `rlsched up`), closed (a standalone master: admins add users)
	// or admin (anyone, enabled by an admin).
	Registration string
	// ArtifactVisibility (ARTIFACT_VISIBILITY) is who may read runs'
	// outputs and resume from them: all (the default) or owner.
	ArtifactVisibility string
	// MaxQueuedPerUser (MAX_QUEUED_PER_USER) caps a user's QUEUED runs; 0:
	// no cap.
	MaxQueuedPerUser int
	// RateLimitMax and RateLimitWindow (RATE_LIMIT_*): at most Max
	// submissions of a user per Window that did not come through the
	// gateway (httpapi/submitlimit.go); 0: no limit (rlsched up's master,
	// behind its gateway).
	RateLimitMax    int
	RateLimitWindow time.Duration
	// MaxInteractiveGPUs (MAX_INTERACTIVE_GPUS) caps the GPUs of a user's
	// interactive sessions not yet ended; 0: no cap.
	MaxInteractiveGPUs int
	// CodeMaxMB and CodeMaxFiles (CODE_MAX_MB, CODE_MAX_FILES) bound a
	// run's code snapshot (codetree); 0: the defaults.
	CodeMaxMB, CodeMaxFiles int
	// InteractiveIdleMinutes (INTERACTIVE_IDLE_MINUTES) ends an interactive
	// session with idle GPUs and no input that long; 0: never.
	InteractiveIdleMinutes int
	// TLSProxy (RLSCHED_TLS_PROXY): a proxy in front ends TLS, so the
	// sign-in cookie is marked Secure.
	TLSProxy bool
	// NotifyAllowHosts (NOTIFY_ALLOW_HOSTS) limits where users' webhooks
	// may go (package notify); empty: any public host.
	NotifyAllowHosts string
	// PublicURL (PUBLIC_URL) is the dashboard's address as users open it,
	// for the links in notifications.
	PublicURL string
	// WorkerForget (WORKER_FORGET_SECONDS) is how long a DOWN worker stays
	// listed; default 24 h.
	WorkerForget time.Duration
	// IdleGPUUtil (IDLE_GPU_UTIL, percent), IdleGPUSeconds (IDLE_GPU_SECONDS;
	// 0: off) and IdleGPUAction (IDLE_GPU_ACTION: warn or cancel) are the
	// idle-run rule (docs/gpus.md); the flags' defaults are 5, 1800, warn.
	IdleGPUUtil    int
	IdleGPUSeconds int
	IdleGPUAction  string

	LogQueue           string // RLSCHED_LOG_QUEUE: the log writers' queue, ring (default) or chan (for benchmarks)
	RunMaxLogBytes     int64  // RUN_MAX_LOG_BYTES: a run's log file at most (logpipe; 0: the default, < 0: none)
	RunMaxMetricPoints int    // RUN_MAX_METRIC_POINTS: a run's stored metric points at most (0: the default, < 0: none)

	// JWTSecret (JWT_SECRET) and JoinToken (WORKER_JOIN_TOKEN), at least
	// 16 bytes each, are required; only `rlsched up` generates them.
	JWTSecret, JoinToken string
	// WorkerIDs (WORKER_IDS), when not empty, are the only worker ids the
	// master admits; others are refused with a logged reason.
	WorkerIDs []string

	// Resources are what a run that asks for no cores or memory gets
	// (DEFAULT_CPUS_PER_GPU, DEFAULT_MEMORY_MB_PER_GPU, DEFAULT_CPUS,
	// DEFAULT_MEMORY_MB); nil: core.DefaultResources.
	Resources *core.ResourceDefaults

	// Policy is the scheduling policy (FAIRSHARE_HALF_LIFE,
	// DEFAULT_USER_GPU_QUOTA; dispatch.Policy).
	Policy dispatch.Policy

	Gateway Gateway // trust in the gateway and registration in Nacos (gateway.go)
	Logger  zerolog.Logger

	// SweepInterval is the sweep controller's pause between steps
	// (sweepctl.DefaultInterval when 0): how soon a tpe sweep proposes
	// after a member ends and a member below a rung's cut is stopped.
	SweepInterval time.Duration

	gpuWatch gpuwatch.Config // from the IdleGPU fields (defaults)
}

// Master is a started master. Its methods are safe for concurrent use.
type Master struct {
	cfg      Config
	raw      store.Store        // the backend, closed last
	metrics  *obs.MasterMetrics // served at /metrics
	st       store.Store        // raw in its decorators (store.Stack): what every room writes through
	ls       lease.Leases
	logs     *logpipe.Writer
	notifier *notify.Notifier
	hub      *live.Hub
	node     *cluster.Node // nil without REDIS_ADDR: one master alone
	noPoll   context.CancelFunc
	disp     *dispatch.Dispatcher
	api      *httpapi.Server
	noSweeps context.CancelFunc // stops the sweep controller
	sweeps   chan struct{}      // closed when it stopped
	httpLn   net.Listener
	httpErr  chan error
	url      string
	rpcAddr  string
	nacos    *discovery.Registration // nil without NACOS_ADDR
	blobs    artifact.Store
	outputs  *artifactpipe.Pipe
	// The dependency controller (deps.go) and what stops it.
	depSink  depSink
	depctl   *depctl.Controller
	noDeps   context.CancelFunc
	depsDone chan struct{}
}

// Start starts a master; on error everything started is stopped again.
func Start(ctx context.Context, cfg Config) (*Master, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	m := &Master{cfg: cfg, httpErr: make(chan error, 1)}
	ok := false
	defer func() {
		if !ok {
			m.Close(context.Background())
		}
	}()
	raw, err := openStore(cfg)
	if err != nil { // raw may be a typed nil: never keep it for Close
		return nil, fmt.Errorf("cannot open the store: %w", err)
	}
	m.raw = raw
	m.metrics = obs.NewMasterMetrics(obs.MasterMetricsOptions{})
	ls, err := openLeases(ctx, cfg)
	if err != nil { // ls may be a typed nil: never keep it for Close
		return nil, fmt.Errorf("cannot open the lease store: %w", err)
	}
	m.ls = ls
	m.hub = live.NewHub(live.HubConfig{LogDir: cfg.LogDir})
	// With Redis, masters may be several (one store, one Redis): events and
	// worker views of the others reach this master's hub through the
	// cluster node, and what happens here reaches theirs.
	var events core.EventSink = m.hub
	if cfg.RedisAddr != "" {
		if m.node, err = cluster.New(cluster.Config{Addr: cfg.RedisAddr, Prefix: cfg.RedisPrefix, MasterID: cfg.MasterID,
			Local: m.hub, Logger: log}); err != nil {
			return nil, fmt.Errorf("cannot join the cluster over redis at %s: %w", cfg.RedisAddr, err)
		}
		events = m.node
	}
	targets, err := notify.ParseTargets(cfg.NotifyAllowHosts)
	if err != nil {
		return nil, err
	}
	// The notifier hears this master's own commits (beside the hub or the
	// cluster node), so each run's end is sent once, by its writer.
	if m.notifier, err = notify.New(notify.Config{Users: m.raw, Sweeps: m.raw, Pipelines: m.raw, Targets: targets, BaseURL: cfg.PublicURL, Logger: log}); err != nil {
		return nil, err
	}
	// Each run that ends charges its owner's fair-share usage, decaying
	// with the policy's half-life.
	halfLife := cfg.Policy.HalfLife
	if halfLife <= 0 {
		halfLife = dispatch.DefaultHalfLife
	}
	// Several masters share LOG_DIR (one filesystem, or a shared one across
	// machines): a run's log is written by whichever master its worker is
	// connected to, so the writer checks files it holds open for growth by
	// others, and the hub polls the files that live tails follow here.
	shared := m.node != nil
	// The store's decorators are declared in one place (store.Stack); the
	// log pipe is built inside it, since a run's end waits for its points.
	if m.st, err = store.Stack(m.raw, store.StackOptions{Observer: m.metrics, HalfLife: halfLife, Sink: sinks{events, m.notifier, &m.depSink},
		Points: func(st store.Store) (store.MetricsWaiter, error) {
			w, err := logpipe.NewWriter(logpipe.WriterConfig{Dir: cfg.LogDir, Store: st, Sink: m.hub,
				SharedDir: shared, Queue: cfg.LogQueue, MaxRunLogBytes: cfg.RunMaxLogBytes, MaxRunMetricPoints: cfg.RunMaxMetricPoints,
				Logger: log})
			m.logs = w
			return w, err
		}}); err != nil {
		return nil, err
	}
	if m.blobs, err = openBlobs(ctx, cfg); err != nil {
		return nil, err
	}
	// The receiver writes through the published store: a warning it puts
	// on a run reaches the dashboards.
	if m.outputs, err = artifactpipe.New(artifactpipe.Config{Blobs: m.blobs, Index: m.st, MaxFileBytes: cfg.ArtifactMaxFileBytes,
		MaxRunBytes: cfg.ArtifactMaxRunBytes, MaxUserBytes: cfg.ArtifactMaxMBPerUser << 20, MaxTotalBytes: cfg.ArtifactMaxMB << 20,
		Logger: log}); err != nil {
		return nil, err
	}
	if shared {
		var pctx context.Context
		pctx, m.noPoll = context.WithCancel(context.Background())
		go m.hub.PollFiles(pctx, 200*time.Millisecond)
	}
	m.httpLn, err = net.Listen("tcp", net.JoinHostPort(cfg.Bind, strconv.Itoa(cfg.MasterPort)))
	if err != nil {
		return nil, fmt.Errorf("cannot listen for REST on port %d: %w", cfg.MasterPort, err)
	}
	dcfg := dispatch.Config{
		Addr: net.JoinHostPort(cfg.RPCBind, strconv.Itoa(cfg.RPCPort)), MasterID: cfg.MasterID, JoinToken: []byte(cfg.JoinToken), WorkerIDs: cfg.WorkerIDs,
		HeartbeatInterval: cfg.HeartbeatTTL / 3, HeartbeatTTL: cfg.HeartbeatTTL, LeaseTTL: cfg.TaskTTL,
		CancelGrace: cfg.CancelGrace, Logger: log, Logs: m.logs, OnWorker: events.WorkerChanged,
		ForgetAfter: cfg.WorkerForget, GPUWatch: cfg.gpuWatch,
		InteractiveIdle: time.Duration(cfg.InteractiveIdleMinutes) * time.Minute, Metrics: m.metrics, Outputs: m.outputs, Blobs: m.blobs,
		Policy: cfg.Policy, OpenRegistration: cfg.Registration == "" || cfg.Registration == httpapi.RegistrationOpen,
	}
	if m.node != nil {
		dcfg.OnCancel = m.node.Cancel
	}
	if m.disp, err = dispatch.New(dcfg, m.st, m.ls); err != nil {
		return nil, err
	}
	var ctl httpapi.Control = m.disp
	if m.node != nil {
		m.node.Attach(cluster.Hooks{Workers: m.disp.Workers, Cancel: m.disp.CancelNotified, Task: m.disp.RemoteTaskChanged,
			Drain:  func(id string, on bool) { _, _ = m.disp.DrainWorker(id, on) }, // only its master knows it
			Forget: func(id string) { _ = m.disp.ForgetWorker(id) }})
		m.node.Start()
		ctl = clusterControl{m.disp, m.node}
	}
	if err := m.disp.Start(ctx); err != nil {
		return nil, err
	}
	m.startDeps(events)
	m.rpcAddr = m.disp.Addr()
	m.metrics.SetSources(m.metricSources())
	apiCfg := httpapi.Config{
		JWTSecret: []byte(cfg.JWTSecret), LogDir: cfg.LogDir, MasterID: cfg.MasterID, Logger: log,
		DefaultTrainer: []string{"python3", "-u", "@scripts/train.py"}, LeasesKind: m.ls.Kind(), Hub: m.hub, Terminals: m.disp, Apps: m.disp,
		PublicHosts: cfg.PublicHosts, Metrics: m.metrics, Registration: cfg.Registration, CookieSecure: cfg.TLSProxy,
		OutputsVisibility: cfg.ArtifactVisibility, MaxQueuedPerUser: cfg.MaxQueuedPerUser,
		SubmitLimitMax: cfg.RateLimitMax, SubmitLimitWindow: cfg.RateLimitWindow,
		MaxInteractiveGPUs: cfg.MaxInteractiveGPUs,
		NotifyTargets:      targets,
		Blobs:              m.blobs, OutputStats: m.outputs.Stats, MaxUserOutputBytes: cfg.ArtifactMaxMBPerUser << 20,
		FairShareHalfLife: halfLife, DefaultGPUQuota: cfg.Policy.DefaultGPUQuota, Resources: cfg.Resources,
		Deps:       m.depctl,
		CodeLimits: codetree.Limits{MaxBytes: int64(cfg.CodeMaxMB) << 20, MaxFiles: cfg.CodeMaxFiles},
	}
	if apiCfg.CodeLimits.MaxBytes == 0 {
		apiCfg.CodeLimits.MaxBytes = codetree.DefaultLimits.MaxBytes
	}
	if apiCfg.CodeLimits.MaxFiles == 0 {
		apiCfg.CodeLimits.MaxFiles = codetree.DefaultLimits.MaxFiles
	}
	cfg.Gateway.apply(&apiCfg)
	if m.api, err = httpapi.New(apiCfg, m.st, ctl); err != nil {
		return nil, err
	}
	go func() { m.httpErr <- m.api.Serve(m.httpLn) }()
	sc := sweepctl.New(sweepctl.Config{Store: m.st, Stopper: m.disp, Grower: m.api, Interval: cfg.SweepInterval,
		Log: log.With().Str("component", "sweepctl").Logger()})
	var sctx context.Context
	sctx, m.noSweeps = context.WithCancel(context.Background())
	m.sweeps = make(chan struct{})
	go func() { defer close(m.sweeps); sc.Run(sctx) }()
	m.url = "http://" + m.httpLn.Addr().String()
	if m.nacos, err = cfg.Gateway.register(m.httpLn.Addr(), cfg.Bind, cfg.MasterID, m.rpcAddr, log); err != nil {
		return nil, err
	}
	storeDesc, leaseDesc := cfg.SQLitePath, "memory"
	if cfg.MySQLDSN != "" {
		storeDesc = "mysql" // not the DSN: it may hold a password
	}
	if cfg.RedisAddr != "" {
		leaseDesc = "redis " + cfg.RedisAddr + " prefix " + cfg.RedisPrefix
	}
	artifacts := cfg.ArtifactDir
	if cfg.ArtifactS3.Endpoint != "" {
		artifacts = "s3 " + cfg.ArtifactS3.Endpoint + " bucket " + cfg.ArtifactS3.Bucket // never the keys
	}
	log.Info().Str("url", m.url).Str("rpc", m.rpcAddr).Str("store", storeDesc).Str("leases", leaseDesc).Str("logs", cfg.LogDir).
		Str("artifacts", artifacts).Msg("master started")
	ok = true
	return m, nil
}

// defaults checks the secrets and fills in the defaults.
func (c *Config) defaults() error {
	if c.JWTSecret == "" {
		return errors.New("JWT_SECRET is not set: give the master a secret of at least 16 bytes (rlsched up generates one)")
	}
	if len(c.JWTSecret) < 16 {
		return errors.New("JWT_SECRET is too short: use at least 16 bytes")
	}
	if c.JoinToken == "" {
		return errors.New("WORKER_JOIN_TOKEN is not set: give the master a secret of at least 16 bytes, and its workers the same token or their own keys (rlsched worker-key ID)")
	}
	if err := codec.CheckJoinToken(c.JoinToken); err != nil {
		return fmt.Errorf("WORKER_JOIN_TOKEN: %w", err)
	}

	if c.DataDir == "" {
		return errors.New("no data dir given (RLSCHED_DATA_DIR)")
	}
	if c.SQLitePath == "" {
		c.SQLitePath = filepath.Join(c.DataDir, "rlsched.db")
	}
	if c.RPCBind == "" {
		c.RPCBind = c.Bind
	}
	if c.LogDir == "" {
		c.LogDir = filepath.Join(c.DataDir, "logs")
	}
	if c.ArtifactDir == "" && c.ArtifactS3.Endpoint == "" {
		c.ArtifactDir = filepath.Join(c.DataDir, "artifacts")
	}
	if err := c.privatePaths(c.Logger); err != nil {
		return err
	}
	if c.RedisPrefix == "" {
		c.RedisPrefix = rediskey.DefaultPrefix
	}
	if err := rediskey.Check(c.RedisPrefix); err != nil {
		return err
	}
	for _, d := range []struct {
		p   *time.Duration
		def time.Duration
	}{{&c.HeartbeatTTL, 30 * time.Second}, {&c.TaskTTL, 2 * time.Minute}, {&c.CancelGrace, 10 * time.Second}} {
		if *d.p == 0 {
			*d.p = d.def
		}
		*d.p = max(*d.p, time.Second)
	}
	cancel, err := gpuwatch.ParseIdleAction(c.IdleGPUAction)
	if err != nil {
		return err
	}
	c.gpuWatch = gpuwatch.Config{IdleUtilPct: c.IdleGPUUtil, IdleAfter: time.Duration(c.IdleGPUSeconds) * time.Second,
		IdleCancel: cancel, MaxGap: gpuwatch.DefaultMaxGap}
	if err := c.gpuWatch.Validate(); err != nil {
		return err
	}
	if c.MasterID == "" {
		host, _ := os.Hostname()
		c.MasterID = fmt.Sprintf("%s-%d", host, c.RPCPort)
		if c.RPCPort == 0 { // a free port is picked later: keep ids of several masters apart
			c.MasterID = fmt.Sprintf("%s-%s", host, core.NewTraceID()[:8])
		}
	}
	return nil
}

// openStore picks MySQL when MYSQL_DSN is set, else SQLite.
func openStore(c Config) (store.Store, error) {
	if c.MySQLDSN != "" {
		return mysql.Open(c.MySQLDSN)
	}
	return sqlite.Open(c.SQLitePath)
}

// openBlobs picks the S3 bucket when ARTIFACT_S3_ENDPOINT is set, else
// ARTIFACT_DIR.
func openBlobs(ctx context.Context, c Config) (artifact.Store, error) {
	if c.ArtifactS3.Endpoint != "" {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return s3.Open(ctx, c.ArtifactS3)
	}
	return disk.Open(c.ArtifactDir)
}

// openLeases picks Redis when REDIS_ADDR is set, else in-memory leases.
func openLeases(ctx context.Context, c Config) (lease.Leases, error) {
	if c.RedisAddr != "" {
		return redis.Open(ctx, c.RedisAddr, redis.Options{Prefix: c.RedisPrefix, DetectReset: true})
	}
	return memory.New(), nil
}

// URL is the REST API's address, http://host:port.
func (m *Master) URL() string { return m.url }

// RPCAddr is the address workers join at.
func (m *Master) RPCAddr() string { return m.rpcAddr }

// MasterID names this master.
func (m *Master) MasterID() string { return m.cfg.MasterID }

// ArtifactDir is where the runs' output files are kept ("" with S3).
func (m *Master) ArtifactDir() string { return m.cfg.ArtifactDir }

// SQLitePath and LogDir are where the master keeps its database (when
// SQLite) and its run logs.
func (m *Master) SQLitePath() string { return m.cfg.SQLitePath }
func (m *Master) LogDir() string     { return m.cfg.LogDir }

// Err receives the REST server's error if it stops on its own.
func (m *Master) Err() <-chan error { return m.httpErr }

// Close stops the master, last started first, within ctx (at most 10 s):
// the gateways stop routing here, then the REST API, the dispatcher, the
// cluster node, the log pipe (it writes what it holds), the leases and the
// store.
func (m *Master) Close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = m.nacos.Close()    // first: the gateways stop routing here before the API stops
	if m.noSweeps != nil { // before the API and the dispatcher it asks
		m.noSweeps()
		<-m.sweeps
	}
	if m.api != nil {
		m.api.Shutdown()
	} else if m.httpLn != nil {
		m.httpLn.Close()
	}
	m.stopDeps()
	if m.disp != nil {
		_ = m.disp.Stop(ctx)
	}
	if m.outputs != nil {
		m.outputs.Close() // after the dispatcher: no chunk comes any more
	}
	if m.node != nil {
		m.node.Close()
	}
	if m.noPoll != nil {
		m.noPoll()
	}
	if m.logs != nil {
		m.logs.Close()
	}
	if m.notifier != nil {
		m.notifier.Close()
	}
	if m.ls != nil {
		m.ls.Close()
	}
	if m.raw != nil {
		m.raw.Close()
	}
}

// sinks hands each event to every sink in order.
type sinks []core.EventSink

func (s sinks) TaskChanged(t core.Task) {
	for _, k := range s {
		k.TaskChanged(t)
	}
}

func (s sinks) WorkerChanged(w core.WorkerInfo) {
	for _, k := range s {
		k.WorkerChanged(w)
	}
}

// clusterControl is the dispatcher as the REST API sees it when masters are
// several: /api/workers lists the workers of every master.
type clusterControl struct {
	*dispatch.Dispatcher
	node *cluster.Node
}

func (c clusterControl) Workers() []core.WorkerInfo { return c.node.Workers() }

// DrainWorker drains the worker here and on the other masters (the one
// holding it takes it). The view answered is this master's when the worker
// is connected here, else the cluster's (its holder shows the new state at
// its next publication).
func (c clusterControl) DrainWorker(id string, drain bool) (core.WorkerInfo, error) {
	w, err := c.Dispatcher.DrainWorker(id, drain)
	c.node.Drain(id, drain)
	if err == nil && w.State != core.WorkerDown && w.State != core.WorkerPending {
		return w, nil
	}
	if v := c.view(id); v != nil {
		return *v, nil
	}
	return w, err
}

// ForgetWorker forgets a DOWN worker here and on the other masters.
func (c clusterControl) ForgetWorker(id string) error {
	v := c.view(id)
	if v == nil {
		return core.ErrNotFound
	}
	if v.State != core.WorkerDown {
		return fmt.Errorf("cannot forget worker %s (%s): %w", id, v.State, core.ErrConflict)
	}
	if err := c.Dispatcher.ForgetWorker(id); err != nil && !errors.Is(err, core.ErrNotFound) {
		return err
	}
	c.node.Forget(id)
	return nil
}

// view is the cluster's view of worker id, or nil.
func (c clusterControl) view(id string) *core.WorkerInfo {
	for _, w := range c.node.Workers() {
		if w.ID == id {
			return &w
		}
	}
	return nil
}
