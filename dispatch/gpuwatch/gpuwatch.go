package gpuwatch

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Unknown stands for a value the worker could not read.
const Unknown = -1

// Metric names of the per-run series, and warning codes.
const (
	MetricUtilization = "sys/gpu_utilization"
	MetricMemory      = "sys/gpu_memory_mb"
	// The run's cores in use and the memory it holds, from its control
	// group on the worker (issue 26).
	MetricCPUCores  = "sys/cpu_cores"
	MetricMemoryRun = "sys/memory_mb"
	CodeIdle        = "idle_gpu"
	CodeForeign     = "gpu_foreign"
)

// Proc is a foreign process: on a GPU, started by no run of its worker.
type Proc struct {
	PID int
	// User and Command are "" when the worker could not resolve the pid
	// (another pid namespace).
	User    string
	Command string
	// MemoryMB is Unknown when not reported.
	MemoryMB int64
}

// GPU is one GPU in a worker's sample.
type GPU struct {
	Index int
	// UtilPct is 0..100, MemoryUsedMB ≥ 0; either may be Unknown.
	UtilPct      int
	MemoryUsedMB int64
	Foreign      []Proc
}

// Sample is one worker's GPUs at one time.
type Sample struct {
	GPUs []GPU
}

func (s Sample) gpu(index int) *GPU {
	for i := range s.GPUs {
		if s.GPUs[i].Index == index {
			return &s.GPUs[i]
		}
	}
	return nil
}

// Run is a RUNNING run on the worker, the GPU indices it holds and its use
// of cores and memory at the sample.
type Run struct {
	ID    string
	GPUs  []int
	Usage Usage
}

// Usage is a run's use of its worker's cores and memory at a sample; Known
// is false when the worker did not report it (no control group).
type Usage struct {
	CPUMillicores int64
	MemoryMB      int64
	Known         bool
}

// Series is one point of a run's GPU series.
type Series struct {
	// UtilPct is the mean utilisation of the run's GPUs that reported one.
	UtilPct float64
	HasUtil bool
	// MemoryMB sums the memory used on the run's GPUs that reported it.
	MemoryMB  int64
	HasMemory bool
}

// RunSeries computes a run's series point from a sample: a GPU that is not
// in the sample or did not report a value is left out of that value; a
// value no GPU reported is absent.
func RunSeries(s Sample, gpus []int) Series {
	var (
		out        Series
		sum, nUtil int
	)
	for _, idx := range gpus {
		g := s.gpu(idx)
		if g == nil {
			continue
		}
		if g.UtilPct >= 0 {
			sum += g.UtilPct
			nUtil++
		}
		if g.MemoryUsedMB >= 0 {
			out.MemoryMB += g.MemoryUsedMB
			out.HasMemory = true
		}
	}
	if nUtil > 0 {
		out.UtilPct = float64(sum) / float64(nUtil)
		out.HasUtil = true
	}
	return out
}

// ForeignGPUs appends to dst the indices of the GPUs that have a foreign
// process: the planner gives them to no new run (pendingCode gpu_foreign).
func ForeignGPUs(s Sample, dst []int) []int {
	for _, g := range s.GPUs {
		if len(g.Foreign) > 0 {
			dst = append(dst, g.Index)
		}
	}
	return dst
}

// Config of the idle rule.
type Config struct {
	// IdleUtilPct: a GPU under it is idle (IDLE_GPU_UTIL, default 5).
	IdleUtilPct int
	// IdleAfter: how long a run's GPUs must all stay idle before the
	// warning (IDLE_GPU_SECONDS, default 1800 s); 0 turns the rule off.
	IdleAfter time.Duration
	// IdleCancel also cancels the run (IDLE_GPU_ACTION=cancel).
	IdleCancel bool
	// MaxGap: samples further apart than this break an idle stretch, which
	// then starts over, since nothing is known of the time between (default
	// 2 min; set it above the workers' GPU_SAMPLE_SECONDS).
	MaxGap time.Duration
}

// Defaults of Config.
const (
	DefaultIdleUtilPct = 5
	DefaultIdleAfter   = 1800 * time.Second
	DefaultMaxGap      = 2 * time.Minute
)

// DefaultConfig is API.md's defaults: warn after 1800 s under 5 %.
func DefaultConfig() Config {
	return Config{IdleUtilPct: DefaultIdleUtilPct, IdleAfter: DefaultIdleAfter, MaxGap: DefaultMaxGap}
}

// ParseIdleAction reads IDLE_GPU_ACTION: "warn" (or empty) or "cancel".
func ParseIdleAction(s string) (cancel bool, err error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "warn":
		return false, nil
	case "cancel":
		return true, nil
	}
	return false, fmt.Errorf("IDLE_GPU_ACTION=%q: want warn or cancel", s)
}

// Validate checks c's ranges.
func (c Config) Validate() error {
	switch {
	case c.IdleUtilPct < 0 || c.IdleUtilPct > 100:
		return fmt.Errorf("IDLE_GPU_UTIL=%d: want a percentage, 0 to 100", c.IdleUtilPct)
	case c.IdleAfter < 0:
		return errors.New("IDLE_GPU_SECONDS must not be negative (0 turns the idle rule off)")
	case c.MaxGap <= 0:
		return errors.New("the idle rule's maximum gap between samples must be positive")
	}
	return nil
}

// Point is a series value of a run at the sample's time.
type Point struct {
	Run   string
	Name  string
	Value float64
}

// Warning for a run: Code is CodeIdle or CodeForeign.
type Warning struct {
	Run     string
	Code    string
	Message string
}

// Cancel asks the master to cancel a run through its normal cancel path.
type Cancel struct {
	Run   string
	Error string
}

// Result is what one sample calls for. Observe reuses its slices.
type Result struct {
	Points   []Point
	Warnings []Warning
	Cancels  []Cancel
	// Foreign lists the GPU indices with a foreign process (ForeignGPUs).
	Foreign []int
}

func (r *Result) reset() {
	r.Points, r.Warnings, r.Cancels, r.Foreign = r.Points[:0], r.Warnings[:0], r.Cancels[:0], r.Foreign[:0]
}

// maxWarnedPIDs bounds the foreign pids remembered per run; past it the
// oldest is forgotten (and would be warned of again if it came back).
const maxWarnedPIDs = 32

// runState is what a Watch remembers of one run.
type runState struct {
	// gen is the Watch's gen at the run's last sample.
	gen uint64
	// lastAt is the time of the run's last sample; idleSince is the start
	// of its current idle stretch (zero when not idle).
	lastAt, idleSince time.Time
	// warned: this idle stretch got its warning; cancelled: a cancel was
	// asked for (once in the run's life).
	warned, cancelled bool
	// warnedPIDs are the foreign pids this run was warned of, oldest first.
	warnedPIDs []int
}

// Watch applies the rules to one worker's samples.
type Watch struct {
	cfg  Config
	gen  uint64
	runs map[string]*runState
}

// NewWatch returns a Watch with cfg (see DefaultConfig).
func NewWatch(cfg Config) *Watch {
	if cfg.MaxGap <= 0 {
		cfg.MaxGap = DefaultMaxGap
	}
	return &Watch{cfg: cfg, runs: map[string]*runState{}}
}

// Observe applies a sample taken at now to the worker's RUNNING runs and
// writes what it calls for into out. A run not in running is forgotten: a
// run seen again later starts with a clean slate.
//
// The idle rule: a run with GPUs whose every GPU reports a utilisation
// under IdleUtilPct is idle; once its samples have stayed idle for
// IdleAfter (no gap over MaxGap), it gets one CodeIdle warning and, with
// IdleCancel, one Cancel "idle GPU for N s". A sample where any of its GPUs
// is busy or did not report resets the stretch, so missing data never
// cancels a run; a later idle stretch of full length warns again. A sample
// older than the run's last is ignored for the rule.
//
// The foreign rule: a run gets one CodeForeign warning for each foreign pid
// on one of its GPUs.
func (w *Watch) Observe(now time.Time, s Sample, running []Run, out *Result) {
	out.reset()
	out.Foreign = ForeignGPUs(s, out.Foreign)
	w.gen++
	for _, r := range running {
		st := w.runs[r.ID]
		if st == nil {
			st = &runState{}
			w.runs[r.ID] = st
		}
		st.gen = w.gen
		ser := RunSeries(s, r.GPUs)
		if ser.HasUtil {
			out.Points = append(out.Points, Point{Run: r.ID, Name: MetricUtilization, Value: ser.UtilPct})
		}
		if ser.HasMemory {
			out.Points = append(out.Points, Point{Run: r.ID, Name: MetricMemory, Value: float64(ser.MemoryMB)})
		}
		if r.Usage.Known {
			out.Points = append(out.Points, Point{Run: r.ID, Name: MetricCPUCores, Value: float64(r.Usage.CPUMillicores) / 1000},
				Point{Run: r.ID, Name: MetricMemoryRun, Value: float64(r.Usage.MemoryMB)})
		}
		w.idle(now, s, r, st, out)
		w.foreign(s, r, st, out)
	}
	if len(w.runs) > len(running) {
		for id, st := range w.runs {
			if st.gen != w.gen {
				delete(w.runs, id)
			}
		}
	}
}

func (w *Watch) idle(now time.Time, s Sample, r Run, st *runState, out *Result) {
	if w.cfg.IdleAfter <= 0 || len(r.GPUs) == 0 {
		return
	}
	if !st.lastAt.IsZero() && !now.After(st.lastAt) {
		return
	}
	gap := !st.lastAt.IsZero() && now.Sub(st.lastAt) > w.cfg.MaxGap
	st.lastAt = now
	if !allIdle(s, r.GPUs, w.cfg.IdleUtilPct) {
		st.idleSince, st.warned = time.Time{}, false
		return
	}
	if st.idleSince.IsZero() || gap {
		st.idleSince, st.warned = now, false
	}
	idleFor := now.Sub(st.idleSince)
	if st.warned || idleFor < w.cfg.IdleAfter {
		return
	}
	st.warned = true
	secs := int64(idleFor / time.Second)
	out.Warnings = append(out.Warnings, Warning{Run: r.ID, Code: CodeIdle,
		Message: fmt.Sprintf("%s idle (under %d%% utilisation) for %d s", gpuList(r.GPUs), w.cfg.IdleUtilPct, secs)})
	if w.cfg.IdleCancel && !st.cancelled {
		st.cancelled = true
		out.Cancels = append(out.Cancels, Cancel{Run: r.ID, Error: fmt.Sprintf("idle GPU for %d s", secs)})
	}
}

// allIdle reports whether every GPU of gpus is in s and reports a
// utilisation under limit.
func allIdle(s Sample, gpus []int, limit int) bool {
	for _, idx := range gpus {
		g := s.gpu(idx)
		if g == nil || g.UtilPct < 0 || g.UtilPct >= limit {
			return false
		}
	}
	return true
}

func (w *Watch) foreign(s Sample, r Run, st *runState, out *Result) {
	for _, idx := range r.GPUs {
		g := s.gpu(idx)
		if g == nil {
			continue
		}
		for _, p := range g.Foreign {
			if slices.Contains(st.warnedPIDs, p.PID) {
				continue
			}
			if len(st.warnedPIDs) == maxWarnedPIDs {
				st.warnedPIDs = append(st.warnedPIDs[:0], st.warnedPIDs[1:]...)
			}
			st.warnedPIDs = append(st.warnedPIDs, p.PID)
			out.Warnings = append(out.Warnings, Warning{Run: r.ID, Code: CodeForeign, Message: foreignMessage(idx, p)})
		}
	}
}

// foreignMessage tells the run's owner who shares its GPU. It leaves out
// the command line, which may carry another user's secrets; admins see it
// in /api/workers.
func foreignMessage(gpu int, p Proc) string {
	var b strings.Builder
	fmt.Fprintf(&b, "GPU %d has a process rlsched did not start: pid %d", gpu, p.PID)
	if p.User != "" {
		fmt.Fprintf(&b, " of user %s", p.User)
	} else {
		b.WriteString(" of an unknown user")
	}
	if p.MemoryMB >= 0 {
		fmt.Fprintf(&b, ", %d MiB", p.MemoryMB)
	}
	return b.String()
}

// IdleSince returns the start of the run's current idle stretch, for the
// fleet view; ok=false when it is not idle or not watched.
func (w *Watch) IdleSince(run string) (since time.Time, ok bool) {
	st := w.runs[run]
	if st == nil || st.idleSince.IsZero() {
		return time.Time{}, false
	}
	return st.idleSince, true
}

func gpuList(gpus []int) string {
	if len(gpus) == 1 {
		return "GPU " + strconv.Itoa(gpus[0])
	}
	parts := make([]string, len(gpus))
	for i, g := range gpus {
		parts[i] = strconv.Itoa(g)
	}
	return "GPUs " + strings.Join(parts, ", ")
}
