package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/artifactpipe"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch"
	"github.com/rlsched/rlsched/httpapi"
	"github.com/rlsched/rlsched/internal/crosssite"
	"github.com/rlsched/rlsched/logpipe"
	"github.com/rlsched/rlsched/masterd"
)

// masterFlags are the flags of a master: each field of masterd.Config has
// one flag and one environment variable (API.md, Configuration).
type masterFlags struct {
	cfg         masterd.Config
	nacos       nacosOpts // → cfg.Gateway.Nacos once parsed (config)
	publicHosts string    // → cfg.PublicHosts
	workerIDs   string    // → cfg.WorkerIDs
	rateLimit   bool      // RATE_LIMIT_ENABLED: cfg.RateLimitMax is rateMax, else 0
	rateMax     int
}

// define adds a master's flags; registration is REGISTRATION's default
// (open for `up`, closed for a standalone master).
func (o *masterFlags) define(f envFlags, registration string) {
	c := &o.cfg
	f.str(&c.DataDir, "data-dir", "RLSCHED_DATA_DIR", defaultDataDir(), "directory for the database, logs and outputs")
	f.str(&c.Bind, "bind", "RLSCHED_BIND", "127.0.0.1", "address REST (and, unless --rpc-bind, the workers' RPC) listens on; 0.0.0.0: all interfaces")
	f.str(&c.RPCBind, "rpc-bind", "RLSCHED_RPC_BIND", "", "address the workers' RPC listens on (default: --bind); the workers must reach it")
	envBool(f, &c.TLSProxy, "tls-proxy", "RLSCHED_TLS_PROXY", false,
		"a proxy in front ends TLS (nginx, docs/deploy.md): mark the sign-in cookie Secure, and bind to all interfaces without a warning")
	f.str(&c.Registration, "registration", "REGISTRATION", registration,
		"who may register: open (anyone), closed (admins add users: rlsched user add), admin (anyone; an admin enables the account)")
	f.str(&c.ArtifactVisibility, "artifact-visibility", "ARTIFACT_VISIBILITY", "all",
		"who may read runs' output files and resume from them: all (every signed-in user; a run submitted private: its owner and admins) or owner (its owner and admins)")
	f.int(&c.MaxQueuedPerUser, "max-queued-per-user", "MAX_QUEUED_PER_USER", 10000,
		"most QUEUED runs a user may have; a submission or sweep past it is refused (0: no cap)")
	f.int(&c.InteractiveIdleMinutes, "interactive-idle-minutes", "INTERACTIVE_IDLE_MINUTES", 0,
		"an interactive session whose GPUs stay idle (IDLE_GPU_UTIL; needs IDLE_GPU_SECONDS > 0) with no input this many `minutes` is told, then cancelled (0: never)")
	f.int(&c.MaxInteractiveGPUs, "max-interactive-gpus", "MAX_INTERACTIVE_GPUS", 0,
		"most GPUs a user's interactive sessions (rlsched shell) may hold or wait for together; a session past it is refused (0: no cap)")
	f.int(&c.CodeMaxMB, "code-max-mb", "CODE_MAX_MB", 100, "largest code snapshot a run may be submitted with, in `MiB` (the sum of its files)")
	f.int(&c.CodeMaxFiles, "code-max-files", "CODE_MAX_FILES", 10000, "most files a run's code snapshot may have")
	f.seconds(&c.WorkerForget, "worker-forget", "WORKER_FORGET_SECONDS", 86400, "`seconds` a DOWN worker stays in the worker list")
	f.int(&c.IdleGPUUtil, "idle-gpu-util", "IDLE_GPU_UTIL", 5, "a RUNNING run whose GPUs all stay under this `percent` of utilisation is idle")
	f.int(&c.IdleGPUSeconds, "idle-gpu-seconds", "IDLE_GPU_SECONDS", 1800, "`seconds` a run must stay idle before the idle_gpu warning (0: never)")
	f.str(&c.IdleGPUAction, "idle-gpu-action", "IDLE_GPU_ACTION", "warn", "what an idle run gets: warn (a warning) or cancel (the warning, then a cancel)")
	f.str(&c.NotifyAllowHosts, "notify-allow-hosts", "NOTIFY_ALLOW_HOSTS", "",
		"hosts users' webhooks may go to (names, addresses, CIDR networks; these also on this network); empty: any public host")
	f.str(&c.PublicURL, "public-url", "PUBLIC_URL", "", "the dashboard's address as users open it, for links in notifications (e.g. https://rlsched.lab.example)")
	f.int(&c.MasterPort, "master-port", "MASTER_PORT", 8082, "REST/WebSocket port (0: any free port)")
	f.int(&c.RPCPort, "rpc-port", "RPC_PORT", 9000, "worker RPC port (0: any free port)")
	f.str(&c.SQLitePath, "sqlite-path", "SQLITE_PATH", "", "SQLite database file (default DATA_DIR/rlsched.db)")
	f.str(&c.LogDir, "log-dir", "LOG_DIR", "", "run log directory (default DATA_DIR/logs); several masters must share one (a shared filesystem across machines)")
	f.str(&c.MySQLDSN, "mysql-dsn", "MYSQL_DSN", "", "MySQL DSN (empty: SQLite)")
	f.str(&c.RedisAddr, "redis-addr", "REDIS_ADDR", "", "Redis address (empty: in-memory leases)")
	f.str(&c.RedisPrefix, "redis-prefix", "REDIS_PREFIX", "rlsched", "prefix of every Redis key, so deployments can share one Redis")
	f.seconds(&c.HeartbeatTTL, "worker-hb-ttl", "WORKER_HB_TTL_SECONDS", 30, "`seconds` without a heartbeat before a worker counts as gone; workers beat every third of it")
	f.seconds(&c.TaskTTL, "worker-task-ttl", "WORKER_TASK_TTL_SECONDS", 120, "run lease TTL in `seconds`; a run whose worker is silent this long is LOST")
	f.seconds(&c.CancelGrace, "cancel-grace", "RLSCHED_CANCEL_GRACE_SECONDS", 10, "`seconds` between SIGTERM and SIGKILL when a run is cancelled")
	f.seconds(&c.SweepInterval, "sweep-interval", "SWEEP_INTERVAL_SECONDS", 2, "`seconds` between two steps of the sweep controller (a tpe sweep's proposals, early stops)")
	f.str(&c.MasterID, "master-id", "RLSCHED_MASTER_ID", "", "name of this master (default host:rpc-port)")
	f.str(&o.publicHosts, "public-hosts", "PUBLIC_HOSTS", "", "more names (host or host:port, comma-separated) the REST API and the gateway answer to besides localhost and the bound address; others are refused 421 (DNS rebinding); * turns the check off")
	f.str(&o.workerIDs, "worker-ids", "WORKER_IDS", "", "the only worker ids admitted (comma-separated; empty: any id whose Hello is sealed with its key)")
	f.str(&c.LogQueue, "log-queue", "RLSCHED_LOG_QUEUE", "ring", "queue between the event loops and the log writers: ring, or chan (to compare them in benchmarks)")
	f.int64(&c.RunMaxLogBytes, "run-max-log-bytes", "RUN_MAX_LOG_BYTES", logpipe.DefaultMaxRunLogBytes,
		"most bytes of a run's log file; output past it is acknowledged but not stored (-1: no cap)")
	f.int(&c.RunMaxMetricPoints, "run-max-metric-points", "RUN_MAX_METRIC_POINTS", logpipe.DefaultMaxRunMetricPoints,
		"most metric points stored per run; later points are dropped and counted (-1: no cap)")
	f.str(&c.ArtifactDir, "artifact-dir", "ARTIFACT_DIR", "", "directory of the runs' output files (default DATA_DIR/artifacts); several masters must share one, or one S3 bucket")
	f.str(&c.ArtifactS3.Endpoint, "artifact-s3-endpoint", "ARTIFACT_S3_ENDPOINT", "", "S3-compatible endpoint, http(s)://host[:port], for the runs' output files instead of ARTIFACT_DIR (the secret key only from env ARTIFACT_S3_SECRET_KEY)")
	f.str(&c.ArtifactS3.Bucket, "artifact-s3-bucket", "ARTIFACT_S3_BUCKET", "", "S3 bucket of the runs' output files")
	f.str(&c.ArtifactS3.AccessKey, "artifact-s3-access-key", "ARTIFACT_S3_ACCESS_KEY", "", "S3 access key")
	f.str(&c.ArtifactS3.Region, "artifact-s3-region", "ARTIFACT_S3_REGION", "", "S3 region (empty: ask the server)")
	f.str(&c.ArtifactS3.Prefix, "artifact-s3-prefix", "ARTIFACT_S3_PREFIX", "", "prefix of every key in the bucket, so installations can share one")
	f.int64(&c.ArtifactMaxFileBytes, "artifact-max-file-bytes", "ARTIFACT_MAX_FILE_BYTES", artifactpipe.DefaultMaxFileBytes,
		"largest output file a run keeps; larger ones are not kept and the run gets a warning (-1: no limit)")
	f.int64(&c.ArtifactMaxRunBytes, "artifact-max-run-bytes", "ARTIFACT_MAX_RUN_BYTES", artifactpipe.DefaultMaxRunBytes,
		"most bytes of output files a run keeps, all attempts; past it files are not kept and the run gets a warning (-1: no limit)")
	f.int64(&c.ArtifactMaxMBPerUser, "artifact-max-mb-per-user", "ARTIFACT_MAX_MB_PER_USER", artifactpipe.DefaultMaxUserMB,
		"most `MiB` of output files all of one user's runs keep together; past it files are not kept and the run gets a warning (0: no limit)")
	f.int64(&c.ArtifactMaxMB, "artifact-max-mb", "ARTIFACT_MAX_MB", 0,
		"most `MiB` of output files every run keeps together (0: no limit)")
	f.duration(&c.Policy.HalfLife, "fairshare-half-life", "FAIRSHARE_HALF_LIFE", dispatch.DefaultHalfLife,
		"half-life of a user's GPU usage in the fair-share order (e.g. 168h)")
	f.int(&c.Policy.DefaultGPUQuota, "default-user-gpu-quota", "DEFAULT_USER_GPU_QUOTA", 0,
		"most GPUs a user without a quota of their own may have active (0: no cap)")
	f.seconds(&c.Policy.BackfillReserve, "backfill-reserve", "BACKFILL_RESERVE_SECONDS", 300,
		"`seconds` a GPU run waits while smaller runs backfill past it before the next GPUs to free on the worker where it fits best are held for it (-1: never)")
	f.seconds(&c.Policy.PreemptCooldown, "preempt-cooldown", "PREEMPT_COOLDOWN_SECONDS", 300,
		"`seconds` a preempted run is spared from another preemption (-1: no preemption)")
	envBool(f, &c.Policy.InteractivePreempts, "interactive-preempts", "INTERACTIVE_PREEMPTS", false,
		"a queued interactive session that fits nowhere may preempt preemptible batch runs of its own priority too (not only lower)")
	c.Resources = &core.ResourceDefaults{}
	d := core.DefaultResources
	f.float64(&c.Resources.CPUsPerGPU, "default-cpus-per-gpu", "DEFAULT_CPUS_PER_GPU", d.CPUsPerGPU,
		"cores a GPU run that does not ask (--cpus) gets, per GPU (0: none)")
	f.int64(&c.Resources.MemoryMBPerGPU, "default-memory-mb-per-gpu", "DEFAULT_MEMORY_MB_PER_GPU", d.MemoryMBPerGPU,
		"MiB of memory a GPU run that does not ask (--memory) gets, per GPU (0: none)")
	f.float64(&c.Resources.CPUs, "default-cpus", "DEFAULT_CPUS", d.CPUs, "cores a CPU-only run that does not ask (--cpus) gets (0: none)")
	f.int64(&c.Resources.MemoryMB, "default-memory-mb", "DEFAULT_MEMORY_MB", d.MemoryMB,
		"MiB of memory a CPU-only run that does not ask (--memory) gets (0: none)")
	defineGatewayTrust(f, &c.Gateway, &o.nacos) // mastergw.go
}

// config is the parsed Config, with the secrets from the environment
// unless set already (rlsched up).
func (o *masterFlags) config(log zerolog.Logger) masterd.Config {
	c := o.cfg
	c.Logger = log
	c.Gateway.Nacos = o.nacos.options(log)
	c.PublicHosts = crosssite.SplitList(o.publicHosts)
	c.WorkerIDs = crosssite.SplitList(o.workerIDs)
	if c.JWTSecret == "" {
		c.JWTSecret = os.Getenv("JWT_SECRET")
	}
	if c.JoinToken == "" {
		c.JoinToken = os.Getenv("WORKER_JOIN_TOKEN")
	}
	if c.ArtifactS3.SecretKey == "" {
		c.ArtifactS3.SecretKey = os.Getenv("ARTIFACT_S3_SECRET_KEY") // a secret: no flag, which ps would show
	}
	return c
}

// defaultDataDir: a system service's place as root (a home under /root is
// out of the runs' reach, and `up` keeps their output dirs in its data dir).
func defaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/rlsched"
	}
	if d, err := os.UserHomeDir(); err == nil {
		return filepath.Join(d, ".local", "share", "rlsched")
	}
	return ".rlsched"
}

// defineRateLimit adds a standalone master's submission limit: the
// gateway's settings, so that one environment configures both, on by
// default (`up`'s master is behind its gateway, which has these flags).
func (o *masterFlags) defineRateLimit(f envFlags) {
	envBool(f, &o.rateLimit, "rate-limit-enabled", "RATE_LIMIT_ENABLED", true,
		"limit each user's submissions that do not come through the gateway (runs, reruns, sweeps and their members, pipelines, retries)")
	f.int(&o.rateMax, "rate-limit-max-requests", "RATE_LIMIT_MAX_REQUESTS", 3, "submissions allowed per window")
	f.seconds(&o.cfg.RateLimitWindow, "rate-limit-window-seconds", "RATE_LIMIT_WINDOW_SECONDS", 10, "rate-limit window in `seconds`")
}

func runMaster(ctx context.Context, args []string) error {
	var o masterFlags
	f := newFlags("master")
	o.define(f, httpapi.RegistrationClosed)
	o.defineRateLimit(f)
	if err := f.parse(args); err != nil {
		return err
	}
	if o.rateLimit {
		o.cfg.RateLimitMax = o.rateMax
	}
	cfg := o.config(newLogger())
	m, err := masterd.Start(ctx, cfg)
	if err != nil {
		return err
	}
	warnOpenBind(cfg.Logger, "the master's REST API", m.URL(), cfg.TLSProxy)
	defer m.Close(context.Background())
	select {
	case <-ctx.Done():
		cfg.Logger.Info().Msg("shutting down")
		return nil
	case err := <-m.Err():
		return fmt.Errorf("REST server stopped: %w", err)
	}
}
