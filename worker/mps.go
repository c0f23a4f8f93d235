package worker

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// GPU_SHARING values: how fractional runs share a GPU.
const (
	// SharingTimeslice leaves them to CUDA's time-slicing; the GPU memory
	// watchdog (gpuwatch.go) stops a run over its memory share.
	SharingTimeslice = "timeslice"
	// SharingMPS runs an MPS control daemon per shared GPU, which limits
	// each run's memory and threads itself; the watchdog only reports.
	SharingMPS = "mps"
)

// resolveSharing picks GPU_SHARING's default and refuses what cannot work.
// An MPS server serves the clients of one uid at a time (a client of
// another uid waits in its CUDA start until the server's clients are all
// gone), and RUN_AS=dynamic gives every run a uid of its own: two runs
// could never share a GPU that way (docs/decisions.md "Issue 28: GPU
// sharing").
func resolveSharing(mode, runAs string) (string, error) {
	switch mode {
	case "", SharingTimeslice:
		return SharingTimeslice, nil
	case SharingMPS:
		if runAs == RunAsDynamic {
			return "", fmt.Errorf("cannot start worker: GPU_SHARING=mps with RUN_AS=dynamic: an MPS server serves one uid at a time and every run has a uid of its own, so no two runs could share a GPU; use RUN_AS=user (the runs of one user share its GPU) or none, or GPU_SHARING=timeslice")
		}
		return SharingMPS, nil
	}
	return "", fmt.Errorf("cannot start worker: GPU_SHARING=%q: want timeslice or mps", mode)
}

// mpsTimeout bounds one call of nvidia-cuda-mps-control.
const mpsTimeout = 10 * time.Second

// mps runs the MPS control daemons of GPU_SHARING=mps: one per GPU while
// it has fractional runs, started for the first and told to quit after the
// last (docs/gpus.md "Sharing a GPU"). Each daemon has its own pipe and log
// dirs under DataDir/mps/gpu<index>, and sees only its GPU. Its methods are
// safe from any goroutine; a daemon starts and quits under mu, so a run
// never finds one half started or quitting.
type mps struct {
	bin  string // nvidia-cuda-mps-control
	dir  string // DataDir/mps
	gpus []GPU
	log  zerolog.Logger

	mu     sync.Mutex
	shared map[int]*mpsGPU // by GPU index, while it has runs
}

// mpsGPU is one GPU's daemon and the runs it serves.
type mpsGPU struct {
	pipe string
	runs int
	// uid is whose MPS server the daemon runs: the first run's. A server
	// serves one uid; a client of another would wait in its CUDA start
	// until every run of this uid on the GPU ended.
	uid uint32
	// daemonPID is the daemon's, from the pid file it writes (0: unknown),
	// so the GPU sampler counts it and its server as the worker's own.
	daemonPID int
}

// newMPS refuses to start a worker whose MPS control binary is missing:
// every fractional run would fail at its start.
func newMPS(cfg Config, log zerolog.Logger) (*mps, error) {
	if _, err := exec.LookPath(cfg.MPSControl); err != nil {
		return nil, fmt.Errorf("cannot start worker: GPU_SHARING=mps, but %s cannot be run (%w); install the NVIDIA driver's MPS tools or use GPU_SHARING=timeslice", cfg.MPSControl, err)
	}
	m := &mps{bin: cfg.MPSControl, dir: filepath.Join(cfg.DataDir, "mps"), gpus: cfg.GPUs, log: log, shared: map[int]*mpsGPU{}}
	// Daemons a crashed predecessor of this data dir left: their runs died
	// with it.
	ents, _ := os.ReadDir(m.dir)
	for _, e := range ents {
		pipe := filepath.Join(m.dir, e.Name(), "pipe")
		if _, err := os.Stat(filepath.Join(pipe, "control")); err == nil {
			if err := m.quit(pipe); err != nil {
				log.Warn().Err(err).Str("pipe", pipe).Msg("cannot stop the MPS control daemon a previous worker left")
			}
		}
	}
	return m, nil
}

// visible is how the daemon of g and its clients name it: its UUID, which
// the daemon's own CUDA_VISIBLE_DEVICES cannot renumber (NVIDIA's MPS
// guide: clients see the daemon's devices renumbered from 0); "0" for a
// GPU without one.
func (g GPU) mpsVisible() string {
	if g.UUID != "" {
		return g.UUID
	}
	return "0"
}

// acquire makes r a client of its GPU's daemon, starting the daemon for
// the GPU's first fractional run, and returns r's environment and the
// function that gives its place back. uid is r's.
func (m *mps) acquire(r *run, uid uint32) (env []string, release func(), err error) {
	idx := r.gpus[0]
	gpu, ok := gpuByIndex(m.gpus, idx)
	if !ok {
		return nil, nil, fmt.Errorf("GPU %d is not on this worker", idx)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.shared[idx]
	if s != nil && s.uid != uid {
		return nil, nil, fmt.Errorf("refused by the worker: GPU %d serves MPS clients of uid %d until its %d runs end, and an MPS server serves one uid at a time (GPU_SHARING=mps); the run's uid is %d", idx, s.uid, s.runs, uid)
	}
	if s == nil {
		if s, err = m.start(gpu, uid); err != nil {
			return nil, nil, err
		}
		m.shared[idx] = s
	}
	s.runs++
	env = []string{
		"CUDA_VISIBLE_DEVICES=" + gpu.mpsVisible(),
		"CUDA_MPS_PIPE_DIRECTORY=" + s.pipe,
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + strconv.Itoa(max(int(math.Round(r.fraction*100)), 1)),
	}
	if r.gpuMemMB > 0 {
		// Device 0 is the run's one GPU as its client sees it.
		env = append(env, fmt.Sprintf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=%dM", r.gpuMemMB))
	}
	var once sync.Once
	return env, func() { once.Do(func() { m.release(idx, s) }) }, nil
}

// start starts the daemon of gpu. Caller holds m.mu.
func (m *mps) start(gpu GPU, uid uint32) (*mpsGPU, error) {
	base := filepath.Join(m.dir, "gpu"+strconv.Itoa(gpu.Index))
	pipe, logDir := filepath.Join(base, "pipe"), filepath.Join(base, "log")
	// Runs reach the pipes under their own uids: the dirs are searchable.
	for _, d := range []string{m.dir, base, pipe, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cannot create MPS dir %s: %w", d, err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return nil, fmt.Errorf("cannot open MPS dir %s to runs: %w", d, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), mpsTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, m.bin, "-d")
	cmd.Env = append(inheritedEnv(nil), "CUDA_VISIBLE_DEVICES="+gpu.mpsVisible(), "CUDA_DEVICE_ORDER=PCI_BUS_ID",
		"CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_LOG_DIRECTORY="+logDir)
	// Its output to a file, not a pipe: the daemon it forks may keep the
	// descriptors, and waiting for a pipe's end would wait for the daemon's.
	outPath := filepath.Join(base, "start.out")
	out, err := os.Create(outPath)
	if err != nil {
		return nil, fmt.Errorf("cannot start the MPS control daemon of GPU %d: %w", gpu.Index, err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	out.Close()
	if err != nil {
		said, _ := os.ReadFile(outPath)
		return nil, fmt.Errorf("cannot start the MPS control daemon of GPU %d (GPU_SHARING=mps): %s -d: %w %s", gpu.Index, m.bin, err, printableTail(said))
	}
	s := &mpsGPU{pipe: pipe, uid: uid}
	if b, err := os.ReadFile(filepath.Join(pipe, "nvidia-cuda-mps-control.pid")); err == nil {
		s.daemonPID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	m.log.Info().Int("gpu", gpu.Index).Uint32("uid", uid).Int("pid", s.daemonPID).Str("pipe", pipe).Msg("MPS control daemon started")
	return s, nil
}

// release ends one run's place on its GPU; the last one stops the daemon.
func (m *mps) release(idx int, s *mpsGPU) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.runs--; s.runs > 0 || m.shared[idx] != s {
		return
	}
	delete(m.shared, idx)
	if err := m.quit(s.pipe); err != nil {
		m.log.Error().Err(err).Int("gpu", idx).Msg("cannot stop the MPS control daemon")
		return
	}
	m.log.Info().Int("gpu", idx).Msg("MPS control daemon stopped: its last run ended")
}

// quit tells the daemon listening in pipe to quit.
func (m *mps) quit(pipe string) error {
	ctx, cancel := context.WithTimeout(context.Background(), mpsTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, m.bin)
	cmd.Env = append(inheritedEnv(nil), "CUDA_MPS_PIPE_DIRECTORY="+pipe)
	cmd.Stdin = strings.NewReader("quit\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s quit: %w %s", m.bin, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// daemons are the pids of the running daemons, for the GPU sampler: they
// and the MPS servers they start are the worker's, not foreign.
func (m *mps) daemons() []int {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int
	for _, s := range m.shared {
		if s.daemonPID > 0 {
			out = append(out, s.daemonPID)
		}
	}
	return out
}

func gpuByIndex(gpus []GPU, idx int) (GPU, bool) {
	for _, g := range gpus {
		if g.Index == idx {
			return g, true
		}
	}
	return GPU{}, false
}

// printableTail is the last line of what a command said, bounded.
func printableTail(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	last := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, lines[len(lines)-1])
	if len(last) > 200 {
		last = last[:200]
	}
	return last
}
