package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/internal/secure"
	"github.com/rlsched/rlsched/worker"
	"github.com/rlsched/rlsched/worker/isolation"
)

type workerOpts struct {
	masters, id, dataDir             string
	gpus, slots                      int
	runAs, uidRange                  string
	tokenFile, keyFile               string
	artifactSync                     int // seconds
	gpuSample                        int // seconds
	enforcement                      string
	reservedCPUs                     string // cores, fractions allowed
	reservedMemoryMB                 int64
	pidsMax                          int64
	diskMaxMB                        int64
	diskMinFree                      int // percent
	cacheMaxMB                       int64
	labels                           labelFlags
	gpuSharing                       string
	gpuMemoryGrace                   int // seconds
	runPython                        string
	envCacheMB                       int64
	codeCacheMB                      int64
	containerRuntime, containerFlags string
	containerNetwork, containerGPUs  string
}

func (o *workerOpts) define(f envFlags) {
	f.str(&o.masters, "master", "RLSCHED_MASTER", "127.0.0.1:9000", "master RPC addresses, host:port[,host:port...] tried in order")
	f.str(&o.id, "id", "RLSCHED_WORKER_ID", "", "worker id (default: the host name and a short id kept in --data-dir; required with a worker key)")
	f.str(&o.dataDir, "data-dir", "RLSCHED_WORKER_DIR", defaultWorkerDir(), "directory for run outputs, the built-in scripts, the output spool and the worker's identity; one per worker")
	f.int(&o.gpus, "gpus", "RLSCHED_GPUS", -1, "GPUs to offer when nvidia-smi is absent (-1: detect)")
	f.int(&o.slots, "slots", "RLSCHED_SLOTS", runtime.NumCPU(), "CPU slots for runs that need no GPU")
	f.str(&o.tokenFile, "join-token-file", "WORKER_JOIN_TOKEN_FILE", "", "file holding the join token, mode 0600 (instead of env WORKER_JOIN_TOKEN)")
	f.str(&o.keyFile, "key-file", "WORKER_KEY_FILE", "", "file holding this worker's own key (rlsched worker-key ID), mode 0600, instead of the join token (or env WORKER_KEY)")
	o.defineIsolation(f)
	o.defineOutputs(f)
	o.defineResources(f, "")
	f.labels(&o.labels)
	f.str(&o.gpuSharing, "gpu-sharing", "GPU_SHARING", "timeslice", "how fractional runs share a GPU: timeslice (CUDA's time-slicing; a run over its GPU memory share is stopped) or mps (an MPS control daemon per shared GPU limits each run's memory and threads; needs RUN_AS=user or none)")
	f.int(&o.gpuMemoryGrace, "gpu-memory-grace", "GPU_MEMORY_GRACE_SECONDS", 30, "`seconds` a fractional run may use more GPU memory than its share before it is stopped (reason gpu_memory)")
	f.str(&o.containerRuntime, "container-runtime", "CONTAINER_RUNTIME", "", "the podman that runs runs' images (`image`): default the one on PATH, if any; off: run no image")
	f.str(&o.containerFlags, "container-flags", "CONTAINER_FLAGS", "", "podman's global flags, space-separated, e.g. \"--storage-driver vfs --runtime runc\" (docs/deploy.md)")
	f.str(&o.containerNetwork, "container-network", "CONTAINER_NETWORK", "host", "the --network of runs in images: host (a run without an image's), none, or a podman network")
	f.str(&o.containerGPUs, "container-gpus", "CONTAINER_GPUS", "devices", "how a run's GPUs enter its image: devices (--device /dev/nvidiaN and the control nodes) or cdi (nvidia.com/gpu=N, the NVIDIA container toolkit's CDI spec)")
}

// defineResources adds the flags of the runs' control groups; `up` has
// them too, with best-effort enforcement by default (enforcement "": the
// worker's own default, required as root).
func (o *workerOpts) defineResources(f envFlags, enforcement string) {
	f.str(&o.enforcement, "resource-enforcement", "RESOURCE_ENFORCEMENT", enforcement, "required (refuse to start without a control group per run), best-effort (run unenforced and say so) or off; default required as root, else best-effort")
	f.str(&o.reservedCPUs, "reserved-cpus", "RESERVED_CPUS", "0", "`cores` kept from runs for the system and the worker (the lowest whole ones leave the runs' cpuset)")
	f.int64(&o.reservedMemoryMB, "reserved-memory", "RESERVED_MEMORY_MB", 0, "`MiB` kept from runs for the system and the worker (0: a twentieth of the memory, within 512 MiB to 4 GiB; -1: none)")
	f.int64(&o.pidsMax, "pids-max", "PIDS_MAX", 16384, "processes and threads one run may have")
	f.int64(&o.diskMaxMB, "disk-max", "DISK_MAX_MB", 0, "`MiB` of disk one run may fill (its outputs, HOME, TMPDIR and its files in /tmp and /var/tmp) before it is stopped (reason disk); 0: no limit a run")
	f.int(&o.diskMinFree, "disk-min-free", "DISK_MIN_FREE_PERCENT", 5, "`percent` of a disk runs write to kept free: below it, the run holding the most of that disk is stopped (reason disk); -1: never")
	f.int64(&o.envCacheMB, "env-cache-max", "ENV_CACHE_MB", 20480, "`MiB` of the Python envs the worker builds from runs' requirements files, least recently used removed past it (never one in use); -1: build none")
	f.int64(&o.codeCacheMB, "code-cache", "CODE_CACHE_MB", 2048, "`MiB` of runs' code snapshots kept on the worker, least recently used trees removed past it")
	f.int64(&o.cacheMaxMB, "cache-max", "CACHE_MAX_MB", 10240, "`MiB` of each user's persistent cache dir on the worker (XDG_CACHE_HOME, PIP_CACHE_DIR, HF_HOME, TORCH_HOME), least recently used files removed past it; -1: no cache dirs")
}

// defineOutputs adds the flags of the runs' outputs; `up` has them too and
// passes them to its workers.
func (o *workerOpts) defineOutputs(f envFlags) {
	f.int(&o.artifactSync, "artifact-sync", "ARTIFACT_SYNC_SECONDS", 30, "`seconds` between uploads of a run's changed output files while it runs (they are sent once more when it ends)")
	f.int(&o.gpuSample, "gpu-sample", "GPU_SAMPLE_SECONDS", 10, "`seconds` between samples of the GPUs with nvidia-smi ($NVIDIA_SMI, else the one on PATH), sent in the heartbeat; 0: never")
}

// defineIsolation adds the flags that say whose uid runs get; `up` has them too.
func (o *workerOpts) defineIsolation(f envFlags) {
	f.str(&o.runAs, "run-as", "RUN_AS", "", "whose uid runs get: dynamic (a uid of --uid-range per run), user (the Unix account named like the run's owner) or none (the worker's); default dynamic as root, else none")
	f.str(&o.runPython, "run-python", "RUN_PYTHON", "", "absolute path of the python a run gets when the python3 on its PATH is one its uid cannot execute (its log says so); default none: such a run fails to start, saying why")
	f.str(&o.uidRange, "uid-range", "RUN_UID_RANGE", "61000-61999", "uids RUN_AS=dynamic gives runs, one per live run: FIRST-LAST")
}

// defaultWorkerDir: as root outside the master's default data dir, so that
// a master and a worker of one machine keep their modes apart (the master's
// 0700, the worker's 0711 for runs to pass).
func defaultWorkerDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/rlsched-worker"
	}
	return filepath.Join(defaultDataDir(), "worker")
}

// workerConfig resolves GPUs (nvidia-smi first, then --gpus); an empty id
// is left to the worker, which derives it from its data dir. The worker
// joins with token; runWorker may give it a key instead.
func workerConfig(o workerOpts, token string, log zerolog.Logger) (worker.Config, error) {
	host, _ := os.Hostname()
	gpus, err := worker.DetectGPUs()
	if err != nil {
		log.Warn().Err(err).Msg("nvidia-smi failed; using --gpus")
	}
	if len(gpus) == 0 && o.gpus > 0 {
		gpus = worker.SyntheticGPUs(o.gpus)
	}
	var masters []string
	for _, m := range strings.Split(o.masters, ",") {
		if m = strings.TrimSpace(m); m != "" {
			masters = append(masters, m)
		}
	}
	if len(masters) == 0 {
		return worker.Config{}, usageError{errors.New("--master is empty")}
	}
	uids, err := isolation.ParseUIDRange(o.uidRange)
	if err != nil {
		return worker.Config{}, usageError{fmt.Errorf("RUN_UID_RANGE: %w", err)}
	}
	reservedCPUs, err := strconv.ParseFloat(o.reservedCPUs, 64)
	if err != nil || reservedCPUs < 0 || math.IsNaN(reservedCPUs) || math.IsInf(reservedCPUs, 0) {
		return worker.Config{}, usageError{fmt.Errorf("RESERVED_CPUS=%q: want a number of cores, 0 or more", o.reservedCPUs)}
	}
	labels, err := o.labels.labelMap()
	if err != nil {
		return worker.Config{}, err
	}
	sample := seconds(o.gpuSample)
	if o.gpuSample <= 0 {
		sample = -1 // never
	}
	return worker.Config{ID: o.id, Masters: masters, JoinToken: token, Host: host, DataDir: o.dataDir,
		GPUs: gpus, Slots: o.slots, RunAs: o.runAs, RunUIDs: uids, ArtifactSync: seconds(max(o.artifactSync, 1)),
		GPUSample: sample, ResourceEnforcement: o.enforcement, ReservedCPUs: reservedCPUs, ReservedMemoryMB: o.reservedMemoryMB,
		PidsMax: o.pidsMax, DiskMaxMB: o.diskMaxMB, DiskMinFreePercent: o.diskMinFree, CacheMaxMB: o.cacheMaxMB, Labels: labels, GPUSharing: o.gpuSharing,
		GPUMemoryGrace: seconds(max(o.gpuMemoryGrace, 0)), RunPython: o.runPython, EnvCacheMB: o.envCacheMB,
		CodeCacheMB: o.codeCacheMB, ContainerRuntime: o.containerRuntime, ContainerFlags: strings.Fields(o.containerFlags),
		ContainerNetwork: o.containerNetwork, ContainerGPUs: o.containerGPUs, Logger: log}, nil
}

func runWorker(ctx context.Context, args []string) error {
	var o workerOpts
	f := newFlags("worker")
	o.define(f)
	if err := f.parse(args); err != nil {
		return err
	}
	log := newLogger()
	token, key, err := workerCredential(o.tokenFile, o.keyFile)
	if err != nil {
		return err
	}
	secure.ScrubEnv() // read: the guard and the runs must not inherit them
	if key != nil && o.id == "" {
		return usageError{errors.New("a worker key is the key of one worker id: pass that id with --id (or RLSCHED_WORKER_ID)")}
	}
	cfg, err := workerConfig(o, token, log)
	if err != nil {
		return err
	}
	cfg.Key = key
	w, err := worker.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer w.Close(context.Background())
	<-ctx.Done()
	return nil
}
