package main

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

	"github.com/rlsched/rlsched/cluster"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/lease"
	"github.com/rlsched/rlsched/core/lease/memory"
	"github.com/rlsched/rlsched/core/lease/redis"
	"github.com/rlsched/rlsched/core/store"
	"github.com/rlsched/rlsched/core/store/mysql"
	"github.com/rlsched/rlsched/core/store/sqlite"
	"github.com/rlsched/rlsched/dispatch"
	"github.com/rlsched/rlsched/gateway/discovery"
	"github.com/rlsched/rlsched/httpapi"
	"github.com/rlsched/rlsched/live"
	"github.com/rlsched/rlsched/logpipe"
)

// masterOpts are the settings of a master, from flags and environment.
type masterOpts struct {
	dataDir, bind, sqlitePath, logDir string
	masterPort, rpcPort               int
	hbTTL, taskTTL, cancelGrace       int // seconds
	mysqlDSN, redisAddr, redisPrefix  string
	masterID                          string
	runMaxLogBytes, runMaxMetrics     int
	jwtSecret, joinToken              string
	gw                                masterGatewayOpts // mastergw.go
}

func (o *masterOpts) define(f envFlags, defaultBind string) {
	f.str(&o.dataDir, "data-dir", "RLSCHED_DATA_DIR", defaultDataDir(), "directory for the database, logs and outputs")
	f.str(&o.bind, "bind", "RLSCHED_BIND", defaultBind, "address to listen on")
	f.int(&o.masterPort, "master-port", "MASTER_PORT", 8082, "REST/WebSocket port (0: any free port)")
	f.int(&o.rpcPort, "rpc-port", "RPC_PORT", 9000, "worker RPC port (0: any free port)")
	f.str(&o.sqlitePath, "sqlite-path", "SQLITE_PATH", "", "SQLite database file (default DATA_DIR/rlsched.db)")
	f.str(&o.logDir, "log-dir", "LOG_DIR", "", "run log directory (default DATA_DIR/logs); several masters must share one (a shared filesystem across machines)")
	f.str(&o.mysqlDSN, "mysql-dsn", "MYSQL_DSN", "", "MySQL DSN (empty: SQLite)")
	f.str(&o.redisAddr, "redis-addr", "REDIS_ADDR", "", "Redis address (empty: in-memory leases)")
	f.str(&o.redisPrefix, "redis-prefix", "REDIS_PREFIX", "rlsched", "prefix of every Redis key, so deployments can share one Redis")
	f.int(&o.hbTTL, "worker-hb-ttl", "WORKER_HB_TTL_SECONDS", 30, "seconds without a heartbeat before a worker counts as gone; workers beat every third of it")
	f.int(&o.taskTTL, "worker-task-ttl", "WORKER_TASK_TTL_SECONDS", 120, "run lease TTL in seconds; a run whose worker is silent this long is LOST")
	f.int(&o.cancelGrace, "cancel-grace", "RLSCHED_CANCEL_GRACE_SECONDS", 10, "seconds between SIGTERM and SIGKILL when a run is cancelled")
	f.str(&o.masterID, "master-id", "RLSCHED_MASTER_ID", "", "name of this master (default host:rpc-port)")
	f.int(&o.runMaxLogBytes, "run-max-log-bytes", "RUN_MAX_LOG_BYTES", logpipe.DefaultMaxRunLogBytes,
		"most bytes of a run's log file; output past it is acknowledged but not stored (-1: no cap)")
	f.int(&o.runMaxMetrics, "run-max-metric-points", "RUN_MAX_METRIC_POINTS", logpipe.DefaultMaxRunMetricPoints,
		"most metric points stored per run; later points are dropped and counted (-1: no cap)")
	o.gw.define(f)
}

func defaultDataDir() string {
	if d, err := os.UserHomeDir(); err == nil {
		return filepath.Join(d, ".local", "share", "rlsched")
	}
	return ".rlsched"
}

// runningMaster is a started master: its store, dispatcher and REST server.
type runningMaster struct {
	st      store.Store // raw, group-committed and wrapped so that every run change reaches the hub
	raw     store.Store
	ls      lease.Leases
	logs    *logpipe.Writer
	hub     *live.Hub
	node    *cluster.Node // nil without REDIS_ADDR: one master alone
	noPoll  context.CancelFunc
	disp    *dispatch.Master
	api     *httpapi.Server
	httpLn  net.Listener
	httpErr chan error
	url     string
	rpcAddr string
	log     zerolog.Logger
	sqlite  string
	logDir  string
	nacos   *discovery.Registration // nil without NACOS_ADDR
}

func startMaster(ctx context.Context, o masterOpts, log zerolog.Logger) (*runningMaster, error) {
	if o.jwtSecret == "" {
		return nil, errors.New("JWT_SECRET is not set: give the master a secret of at least 16 bytes (rlsched up generates one)")
	}
	if len(o.jwtSecret) < 16 {
		return nil, errors.New("JWT_SECRET is too short: use at least 16 bytes")
	}
	if o.joinToken == "" {
		return nil, errors.New("WORKER_JOIN_TOKEN is not set: give the master and its workers the same secret token")
	}
	if err := os.MkdirAll(o.dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create data dir: %w", err)
	}
	if o.sqlitePath == "" {
		o.sqlitePath = filepath.Join(o.dataDir, "rlsched.db")
	}
	if o.logDir == "" {
		o.logDir = filepath.Join(o.dataDir, "logs")
	}
	rm := &runningMaster{log: log, sqlite: o.sqlitePath, logDir: o.logDir, httpErr: make(chan error, 1)}
	ok := false
	defer func() {
		if !ok {
			rm.close(context.Background())
		}
	}()
	raw, err := openStore(o)
	if err != nil { // raw may be a typed nil: never keep it for close
		return nil, fmt.Errorf("cannot open the store: %w", err)
	}
	rm.raw = raw
	rm.hub = live.NewHub(live.HubConfig{LogDir: o.logDir})
	id := o.masterID
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s-%d", host, o.rpcPort)
		if o.rpcPort == 0 { // a free port is picked later: keep ids of several masters apart
			id = fmt.Sprintf("%s-%s", host, core.NewTraceID()[:8])
		}
	}
	// With Redis, masters may be several (one store, one Redis): events and
	// worker views of the others reach this master's hub through the
	// cluster node, and what happens here reaches theirs.
	var events core.EventSink = rm.hub
	if o.redisAddr != "" {
		if rm.node, err = cluster.New(cluster.Config{Addr: o.redisAddr, Prefix: o.redisPrefix, MasterID: id,
			Local: rm.hub, Logger: log}); err != nil {
			return nil, fmt.Errorf("cannot join the cluster over redis at %s: %w", o.redisAddr, err)
		}
		events = rm.node
	}
	if rm.ls, err = openLeases(ctx, o); err != nil {
		return nil, fmt.Errorf("cannot open the lease store: %w", err)
	}
	// Single-row writes (REST submissions, the dispatcher's transitions)
	// are group-committed by the Batcher. Metric points go to it from the
	// log writer's own queue.
	batched := store.NewBatcher(rm.raw, 0)
	// Several masters share LOG_DIR (one filesystem, or a shared one across
	// machines): a run's log is written by whichever master its worker is
	// connected to, so the writer checks files it holds open for growth by
	// others, and the hub polls the files that live tails follow here.
	shared := rm.node != nil
	if rm.logs, err = logpipe.NewWriter(logpipe.WriterConfig{Dir: o.logDir, Store: batched, Sink: rm.hub,
		SharedDir: shared, MaxRunLogBytes: int64(o.runMaxLogBytes), MaxRunMetricPoints: o.runMaxMetrics, Logger: log}); err != nil {
		return nil, err
	}
	// A run's end is written after its metric points (MetricsFirst); the
	// event publisher stays outermost so every committed change reaches
	// the hub.
	rm.st = store.Publishing(logpipe.MetricsFirst(batched, rm.logs), events)
	if shared {
		var pctx context.Context
		pctx, rm.noPoll = context.WithCancel(context.Background())
		go rm.hub.PollFiles(pctx, 200*time.Millisecond)
	}
	rm.httpLn, err = net.Listen("tcp", net.JoinHostPort(o.bind, strconv.Itoa(o.masterPort)))
	if err != nil {
		return nil, fmt.Errorf("cannot listen for REST on port %d: %w", o.masterPort, err)
	}
	hbTTL := seconds(max(o.hbTTL, 1))
	dcfg := dispatch.Config{
		Addr: net.JoinHostPort(o.bind, strconv.Itoa(o.rpcPort)), MasterID: id, JoinToken: []byte(o.joinToken),
		HeartbeatInterval: hbTTL / 3, HeartbeatTTL: hbTTL, LeaseTTL: seconds(max(o.taskTTL, 1)),
		CancelGrace: seconds(max(o.cancelGrace, 1)), Logger: log, Logs: rm.logs, OnWorker: events.WorkerChanged,
	}
	if rm.node != nil {
		dcfg.OnCancel = rm.node.Cancel
	}
	rm.disp, err = dispatch.New(dcfg, rm.st, rm.ls)
	if err != nil {
		return nil, err
	}
	var ctl httpapi.Control = rm.disp
	if rm.node != nil {
		rm.node.Attach(cluster.Hooks{Workers: rm.disp.Workers, Cancel: rm.disp.CancelNotified, Task: rm.disp.RemoteTaskChanged})
		rm.node.Start()
		ctl = clusterControl{rm.disp, rm.node}
	}
	if err := rm.disp.Start(ctx); err != nil {
		return nil, err
	}
	rm.rpcAddr = rm.disp.Addr()
	apiCfg := httpapi.Config{
		JWTSecret: []byte(o.jwtSecret), LogDir: o.logDir, MasterID: id, Logger: log,
		DefaultTrainer: []string{"python3", "-u", "@scripts/train.py"}, LeasesKind: rm.ls.Kind(), Hub: rm.hub,
	}
	o.gw.apply(&apiCfg)
	rm.api, err = httpapi.New(apiCfg, rm.st, ctl)
	if err != nil {
		return nil, err
	}
	go func() { rm.httpErr <- rm.api.Serve(rm.httpLn) }()
	rm.url = "http://" + rm.httpLn.Addr().String()
	if rm.nacos, err = o.gw.register(rm.httpLn.Addr(), o.bind, id, rm.rpcAddr, log); err != nil {
		return nil, err
	}
	storeDesc, leaseDesc := o.sqlitePath, "memory"
	if o.mysqlDSN != "" {
		storeDesc = "mysql" // not the DSN: it may hold a password
	}
	if o.redisAddr != "" {
		leaseDesc = "redis " + o.redisAddr + " prefix " + o.redisPrefix
	}
	log.Info().Str("url", rm.url).Str("rpc", rm.rpcAddr).Str("store", storeDesc).Str("leases", leaseDesc).Str("logs", o.logDir).Msg("master started")
	ok = true
	return rm, nil
}

// openStore picks MySQL when MYSQL_DSN is set, else SQLite.
func openStore(o masterOpts) (store.Store, error) {
	if o.mysqlDSN != "" {
		return mysql.Open(o.mysqlDSN)
	}
	return sqlite.Open(o.sqlitePath)
}

// openLeases picks Redis when REDIS_ADDR is set, else in-memory leases.
func openLeases(ctx context.Context, o masterOpts) (lease.Leases, error) {
	if o.redisAddr != "" {
		return redis.Open(ctx, o.redisAddr, redis.Options{Prefix: o.redisPrefix, DetectReset: true})
	}
	return memory.New(), nil
}

func (rm *runningMaster) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = rm.nacos.Close() // first: the gateways stop routing here before the API stops
	if rm.api != nil {
		rm.api.Shutdown()
	} else if rm.httpLn != nil {
		rm.httpLn.Close()
	}
	if rm.disp != nil {
		_ = rm.disp.Stop(ctx)
	}
	if rm.node != nil {
		rm.node.Close()
	}
	if rm.noPoll != nil {
		rm.noPoll()
	}
	if rm.logs != nil {
		rm.logs.Close()
	}
	if rm.ls != nil {
		rm.ls.Close()
	}
	if rm.raw != nil {
		rm.raw.Close()
	}
}

func runMaster(ctx context.Context, args []string) error {
	var o masterOpts
	f := newFlags("master")
	o.define(f, "0.0.0.0")
	if err := f.parse(args); err != nil {
		return err
	}
	o.jwtSecret, o.joinToken = os.Getenv("JWT_SECRET"), os.Getenv("WORKER_JOIN_TOKEN")
	log := newLogger()
	rm, err := startMaster(ctx, o, log)
	if err != nil {
		return err
	}
	defer rm.close(context.Background())
	select {
	case <-ctx.Done():
		log.Info().Msg("shutting down")
		return nil
	case err := <-rm.httpErr:
		return fmt.Errorf("REST server stopped: %w", err)
	}
}

// clusterControl is the dispatcher as the REST API sees it when masters are
// several: /api/workers lists the workers of every master.
type clusterControl struct {
	*dispatch.Master
	node *cluster.Node
}

func (c clusterControl) Workers() []core.WorkerInfo { return c.node.Workers() }
