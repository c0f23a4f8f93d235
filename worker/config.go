package worker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/worker/cgroup"
	"github.com/rlsched/rlsched/worker/isolation"
	"github.com/rlsched/rlsched/worker/nvsmi"
	"github.com/rlsched/rlsched/worker/outputs"
)

// GPU is one accelerator of this machine, as reported in Hello.
type GPU struct {
	Index int
	// UUID is nvidia-smi's GPU-…; "" for a synthetic GPU (--gpus N).
	UUID     string
	Name     string
	MemoryMB int64
	// CPUAffinity is the cores near it (nvidia-smi topo -m), a cpu list;
	// "" when unknown.
	CPUAffinity string
	// Minor numbers its device node, /dev/nvidia<Minor>, which only the
	// runs given this GPU may open (worker/cgroup).
	Minor int
}

// Whose uid a run gets (Config.RunAs): the modes of package isolation.
const (
	RunAsDynamic = isolation.RunAsDynamic
	RunAsUser    = isolation.RunAsUser
	RunAsNone    = isolation.RunAsNone
)

// Config of a worker. Zero values get the defaults named on each field.
type Config struct {
	// ID names the worker to the master: [A-Za-z0-9_-]{1,64}. Default: the
	// host name, a dash and a short random suffix kept in DataDir
	// (myhost-3f9a2c), so each data dir is one identity; required with Key.
	ID string
	// Masters are host:port RPC addresses, tried in order; on failure the
	// worker fails over to the next one. Required.
	Masters []string
	// JoinToken is the farm's shared secret, from which the worker derives
	// its own key (codec.WorkerKey); at least codec.MinJoinToken bytes.
	// Key instead is that key alone (`rlsched worker-key ID`), so that the
	// machine never holds the farm's token. Exactly one of them is required.
	JoinToken string
	Key       []byte
	// Host is reported to the master; default os.Hostname().
	Host string
	// DataDir holds run outputs (DataDir/outputs/<taskId>/<attempt>), the
	// materialised scripts (DataDir/scripts), the output spool (DataDir/spool)
	// and the worker's identity (datadir.go); see package isolation's
	// prepareDataDir for the modes. One live worker per dir: a second one
	// fails to start.
	// Required; made absolute.
	DataDir string
	// GPUs of this machine (DetectGPUs, or SyntheticGPUs for --gpus N).
	GPUs []GPU
	// Slots is how many runs may share the worker; default len(GPUs), or 1.
	Slots int
	// HeartbeatInterval is used until a HelloAck names one; default 10s.
	HeartbeatInterval time.Duration
	// Grace between SIGTERM and SIGKILL when a CancelTask names none, on
	// timeouts, on kills ordered by the master and on shutdown; default 10s.
	Grace time.Duration
	// SpoolMemory bounds the unacked output of one run held in memory;
	// default 8 MiB. Past it output spills to DataDir/spool, up to
	// SpoolDisk (default 1 GiB; negative: no spilling); past both the run
	// blocks on its next write until the master acks.
	SpoolMemory int
	SpoolDisk   int64
	// RunAs decides whose uid runs get (package isolation): RunAsDynamic,
	// RunAsUser or RunAsNone; "" picks RunAsDynamic for a worker running as
	// root on Linux, else RunAsNone. RunAsDynamic and RunAsUser need root.
	RunAs string
	// RunUIDs is the range RunAsDynamic hands out, one uid per live run;
	// default 61000-61999.
	RunUIDs isolation.UIDRange
	// UIDLockDir holds a lock file per uid in use, so that the workers of a
	// machine never give one uid to two runs; default /run/rlsched/uids.
	UIDLockDir string
	// ArtifactSync (ARTIFACT_SYNC_SECONDS) is how often at most a run's
	// changed output files are sent while it runs; they are sent once
	// more when it ends. Default 30 s.
	ArtifactSync time.Duration
	// GPUSample (GPU_SAMPLE_SECONDS) is how often the worker samples its
	// GPUs with nvidia-smi and reports them in its heartbeat (docs/gpus.md),
	// with its runs' use of cores and memory (a worker without GPUs samples
	// only those); default 10 s; negative: never.
	GPUSample time.Duration
	// NvidiaSMI is the nvidia-smi to run; default $NVIDIA_SMI, else the one
	// on PATH.
	NvidiaSMI string
	// ResourceEnforcement (RESOURCE_ENFORCEMENT) is what the worker does
	// when runs cannot get control groups of their own (worker/cgroup):
	// cgroup.Required refuses to start, cgroup.BestEffort runs them
	// unenforced and says so in Hello, cgroup.Off never tries. Default
	// Required as root, else BestEffort.
	ResourceEnforcement string
	// ReservedCPUs (RESERVED_CPUS) and ReservedMemoryMB
	// (RESERVED_MEMORY_MB) are kept from runs for the system and the
	// worker: the lowest whole cores leave the runs' cpuset, and every run
	// together is capped at the machine's memory less ReservedMemoryMB.
	// Default no cores, and a twentieth of the memory within 512 MiB to
	// 4 GiB; a negative ReservedMemoryMB keeps none.
	ReservedCPUs     float64
	ReservedMemoryMB int64
	// PidsMax (PIDS_MAX) bounds the processes and threads of one run;
	// default 16384.
	PidsMax int64
	// DiskMaxMB (DISK_MAX_MB) is the disk one run may fill on this worker
	// (diskwatch.go): its outputs, its private dir (HOME, TMPDIR) and,
	// under a uid of its own, what it keeps in /tmp and /var/tmp; past it
	// the run is stopped with reason disk. 0: no limit a run.
	DiskMaxMB int64
	// DiskMinFreePercent (DISK_MIN_FREE_PERCENT): when a disk runs write
	// to (its outputs' and private dirs', /tmp's, /var/tmp's) has less
	// free than this share of its size, the run holding the most of it is
	// stopped with reason disk; default 5; negative: never.
	DiskMinFreePercent int
	// CacheMaxMB (CACHE_MAX_MB) caps each rlsched user's persistent cache
	// dir on this worker (isolation.Caches: XDG_CACHE_HOME, PIP_CACHE_DIR,
	// HF_HOME, TORCH_HOME); default 10240; negative: no cache dirs.
	CacheMaxMB int64
	// Labels (--label KEY=VALUE, WORKER_LABELS) are the operator's labels,
	// which runs' constraints match (labels.go): keys [a-z0-9._/-]{1,63},
	// printable values of at most 128 bytes, none of the automatic keys
	// (gpu.type, gpu.count, cpu.count, hostname), which the worker adds.
	Labels map[string]string
	// GPUSharing (GPU_SHARING) is how fractional runs share a GPU:
	// SharingTimeslice (the default: CUDA's time-slicing, the GPU memory
	// watchdog stops a run over its share) or SharingMPS (one MPS control
	// daemon per shared GPU; see mps.go).
	GPUSharing string
	// GPUMemoryGrace (GPU_MEMORY_GRACE_SECONDS) is how long a run may use
	// more GPU memory than its share before the watchdog stops it; default
	// 30 s.
	GPUMemoryGrace time.Duration
	// MPSControl is the nvidia-cuda-mps-control to run; default the one
	// on PATH.
	MPSControl string
	// EnvCacheMB (ENV_CACHE_MB) caps the Python envs the worker builds
	// from runs' requirements files (DataDir/envs), the least recently
	// used removed past it, never one in use; default 20480; negative:
	// the worker builds none.
	EnvCacheMB int64
	// RunPython (RUN_PYTHON) is the interpreter a run gets when the python
	// its command names (python, python3, python3.N) is one its uid cannot
	// execute, e.g. pyenv's under /root; the run's log says so. "": such a
	// run fails to start, saying why (issue 27).
	RunPython string
	// CodeCacheMB (CODE_CACHE_MB) caps the worker's cache of runs' code
	// snapshots (worker/codecache, DataDir/code); default 2048.
	CodeCacheMB int64
	// ContainerRuntime (CONTAINER_RUNTIME) is the podman that runs runs'
	// images (image.go): "" the one on PATH, if any (none: the worker runs
	// no image, and says so in Hello); "off" none; else a path or name
	// that must work. ContainerFlags (CONTAINER_FLAGS) are its global
	// flags, e.g. --storage-driver vfs --runtime runc (docs/deploy.md);
	// ContainerNetwork (CONTAINER_NETWORK) its --network, default
	// DefaultContainerNetwork; ContainerGPUs (CONTAINER_GPUS) how GPUs
	// pass, ContainerGPUsDevices (the default) or ContainerGPUsCDI.
	ContainerRuntime string
	ContainerFlags   []string
	ContainerNetwork string
	ContainerGPUs    string
	// Logger for the worker's own messages; the zero value logs nothing.
	Logger zerolog.Logger

	// now stamps GPU samples, which time the GPU memory grace; nil:
	// time.Now. Tests set it to step the grace without sleeping.
	now func() time.Time
	// diskEvery is how often the disk watchdog looks; default
	// defaultDiskEvery.
	diskEvery time.Duration
	// devDir holds the GPUs' device nodes, /dev; tests make fake ones.
	devDir string
}

const (
	defaultHeartbeat = 10 * time.Second
	defaultGrace     = 10 * time.Second
	// Output spool bounds per run (Config.SpoolMemory, SpoolDisk).
	defaultSpoolMemory = 8 << 20
	defaultSpoolDisk   = 1 << 30
	// defaultLeaseTTL applies when a HelloAck names no lease TTL (DESIGN.md).
	defaultLeaseTTL = 2 * time.Minute
	// defaultPidsMax: room for an RL run's env workers and their threads,
	// far below what a fork bomb would take from the machine.
	defaultPidsMax = 16384
	// defaultCacheMaxMB holds a few models and wheels per user.
	defaultCacheMaxMB = 10240
	// defaultGPUMemoryGrace: long enough for a framework's allocator to
	// give back a transient peak, short enough that neighbours on the GPU
	// do not fail their own allocations for long.
	defaultGPUMemoryGrace = 30 * time.Second
	// defaultCodeCacheMB holds twenty trees at CODE_MAX_MB.
	defaultCodeCacheMB = 2048
	// defaultDiskMinFreePercent: room for the system's and the worker's
	// own writes once the runs have filled a disk, as kubelet keeps
	// (nodefs.available).
	defaultDiskMinFreePercent = 5
	// defaultDiskEvery: a run writing 1 GB/s fills 5 GB between two
	// looks; a look is a statfs per disk unless a limit applies.
	defaultDiskEvery = 5 * time.Second
)

// withDefaults validates c and fills in the defaults.
func (c Config) withDefaults() (Config, error) {
	if c.ID != "" && !core.ValidWorkerID(c.ID) {
		return c, fmt.Errorf("cannot start worker: id %q must match [A-Za-z0-9_-]{1,64}", c.ID)
	}
	if len(c.Masters) == 0 {
		return c, errors.New("cannot start worker: no master address given; pass at least one host:port")
	}
	switch {
	case c.JoinToken != "" && c.Key != nil:
		return c, errors.New("cannot start worker: given both a join token and a worker key; give one")
	case c.Key != nil:
		if len(c.Key) != codec.WorkerKeySize {
			return c, fmt.Errorf("cannot start worker: a worker key of %d bytes, want %d (as `rlsched worker-key ID` prints it, in hex)", len(c.Key), codec.WorkerKeySize)
		}
		if c.ID == "" {
			return c, errors.New("cannot start worker: a worker key is the key of one worker id: pass that id (--id)")
		}
	case c.JoinToken == "":
		return c, errors.New("cannot start worker: no join token or worker key; give the master's join token or this worker's key (rlsched worker-key ID)")
	default:
		if err := codec.CheckJoinToken(c.JoinToken); err != nil {
			return c, fmt.Errorf("cannot start worker: %w", err)
		}
	}
	if c.DataDir == "" {
		return c, errors.New("cannot start worker: empty data dir")
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return c, fmt.Errorf("cannot resolve data dir %q: %w", c.DataDir, err)
	}
	c.DataDir = abs
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	if c.Slots <= 0 {
		c.Slots = max(len(c.GPUs), 1)
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = defaultHeartbeat
	}
	if c.Grace <= 0 {
		c.Grace = defaultGrace
	}
	if c.SpoolMemory <= 0 {
		c.SpoolMemory = defaultSpoolMemory
	}
	switch {
	case c.SpoolDisk == 0:
		c.SpoolDisk = defaultSpoolDisk
	case c.SpoolDisk < 0:
		c.SpoolDisk = 0
	}
	if c.RunAs, err = isolation.ResolveRunAs(c.RunAs); err != nil {
		return c, err
	}
	if c.RunUIDs == (isolation.UIDRange{}) {
		c.RunUIDs = isolation.DefaultUIDRange
	}
	if err := c.RunUIDs.Validate(); err != nil {
		return c, fmt.Errorf("cannot start worker: RUN_UID_RANGE: %w", err)
	}
	if c.UIDLockDir == "" {
		c.UIDLockDir = isolation.DefaultUIDLockDir
	}
	if c.ArtifactSync <= 0 {
		c.ArtifactSync = outputs.DefaultSync
	}
	if c.GPUSample == 0 {
		c.GPUSample = nvsmi.DefaultInterval
	}
	if c.ResourceEnforcement, err = cgroup.ResolveMode(c.ResourceEnforcement); err != nil {
		return c, err
	}
	if c.ReservedCPUs < 0 || c.ReservedCPUs != c.ReservedCPUs {
		return c, fmt.Errorf("cannot start worker: RESERVED_CPUS=%v: want a number of cores, 0 or more", c.ReservedCPUs)
	}
	if c.PidsMax <= 0 {
		c.PidsMax = defaultPidsMax
	}
	if c.RunPython != "" && !filepath.IsAbs(c.RunPython) {
		return c, fmt.Errorf("cannot start worker: RUN_PYTHON=%q: want an absolute path, e.g. /usr/bin/python3", c.RunPython)
	}
	if c.EnvCacheMB == 0 {
		c.EnvCacheMB = defaultEnvCacheMB
	}
	if c.CacheMaxMB == 0 {
		c.CacheMaxMB = defaultCacheMaxMB
	}
	if err := checkLabels(c.Labels); err != nil {
		return c, err
	}
	if c.GPUSharing, err = resolveSharing(c.GPUSharing, c.RunAs); err != nil {
		return c, err
	}
	if c.DiskMaxMB < 0 {
		return c, fmt.Errorf("cannot start worker: DISK_MAX_MB=%d: want MiB, 0 (no limit) or more", c.DiskMaxMB)
	}
	if c.DiskMinFreePercent == 0 {
		c.DiskMinFreePercent = defaultDiskMinFreePercent
	} else if c.DiskMinFreePercent >= 100 {
		return c, fmt.Errorf("cannot start worker: DISK_MIN_FREE_PERCENT=%d: want less than 100 (negative: never)", c.DiskMinFreePercent)
	}
	if c.diskEvery <= 0 {
		c.diskEvery = defaultDiskEvery
	}
	if c.GPUMemoryGrace <= 0 {
		c.GPUMemoryGrace = defaultGPUMemoryGrace
	}
	if c.MPSControl == "" {
		c.MPSControl = "nvidia-cuda-mps-control"
	}
	if c.CodeCacheMB <= 0 {
		c.CodeCacheMB = defaultCodeCacheMB
	}
	if c.ContainerNetwork == "" {
		c.ContainerNetwork = DefaultContainerNetwork
	}
	switch c.ContainerGPUs {
	case "":
		c.ContainerGPUs = ContainerGPUsDevices
	case ContainerGPUsDevices, ContainerGPUsCDI:
	default:
		return c, fmt.Errorf("cannot start worker: CONTAINER_GPUS=%q: want %s or %s", c.ContainerGPUs, ContainerGPUsDevices, ContainerGPUsCDI)
	}
	return c, nil
}
