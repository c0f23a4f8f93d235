package nvsmi

import (
	"cmp"
	"context"
	"fmt"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultInterval is GPU_SAMPLE_SECONDS's default.
const DefaultInterval = 10 * time.Second

// maxCommand is how much of a foreign process's command line is reported.
const maxCommand = 200

// maxProblem bounds a sample's Problem text.
const maxProblem = 600

// RunGroup is a run the worker started: the process group it leads and the
// GPU indices it was given.
type RunGroup struct {
	PGID int
	GPUs []int
}

// Process is a foreign compute process: on a GPU, in no run's process group.
type Process struct {
	PID int
	// User owns /proc/PID: a user name, or the uid when it has none.
	User string
	// Command is its command line, printable, at most 200 bytes; "[comm]"
	// when it has none.
	Command string
	// MemoryMB is in MiB, Unknown when nvidia-smi did not say.
	MemoryMB int64
	// Unresolved: the pid is not in this worker's /proc (User and Command
	// are empty). See Sampler for when such a process counts as foreign.
	Unresolved bool
}

// GPUState is one GPU in a sample.
type GPUState struct {
	GPU
	// Foreign processes, by pid.
	Foreign []Process
}

// RunUse is what one run's processes hold.
type RunUse struct {
	PGID int
	// GPUs are the indices its processes have contexts on, ascending.
	GPUs []int
	// MemoryMB sums what nvidia-smi reported for its processes.
	MemoryMB int64
}

// Sample is one look at the worker's GPUs. A published Sample is never
// changed: share it freely.
type Sample struct {
	// Seq counts samples from 1, so a heartbeat can tell a new one.
	Seq uint64
	At  time.Time
	// GPUs by index: every expected GPU (Config.GPUs), with Unknown values
	// for one nvidia-smi did not answer for.
	GPUs []GPUState
	// Runs by PGID: the runs with a process on a GPU.
	Runs []RunUse
	// Problem says why the sample is incomplete, for a person; "" when it
	// is not.
	Problem string
	// Apps: the process query answered, so Runs is this sample's own; when
	// it failed, Runs is the last sample's, carried.
	Apps bool
}

// Config of a Sampler. Only Runs is needed; the rest have defaults.
type Config struct {
	// Bin is the nvidia-smi to run (default BinFromEnv()).
	Bin string
	// Interval between samples (default DefaultInterval).
	Interval time.Duration
	// Timeout of one nvidia-smi call (default DefaultTimeout).
	Timeout time.Duration
	// Runner replaces Command(Bin, Timeout).
	Runner Runner
	// Now stamps samples (default time.Now).
	Now func() time.Time
	// Runs returns the runs the worker started. Called on the sampler's
	// goroutine once per sample; it must be safe against the worker's own
	// updates. Nil: no runs.
	Runs func() []RunGroup
	// Helpers returns the pids of the worker's own helpers on the GPUs
	// (MPS control daemons): a compute process that is one of them or
	// their descendant (an MPS server) is neither a run's nor foreign. Nil:
	// none.
	Helpers func() []int
	// GPUs are the indices the worker advertises; a sample has exactly
	// these. Nil: whatever nvidia-smi lists.
	GPUs []int
	// OnProblem is called on the sampler's goroutine when the Problem
	// changes ("" when it is gone), so the worker reports it once.
	OnProblem func(problem string)
	// OnSample, when set, is called on the sampler's goroutine with each
	// sample once it is published (the worker's GPU memory watchdog). It
	// must not block.
	OnSample func(*Sample)
	// ProcRoot is where procfs is mounted (default /proc).
	ProcRoot string
}

// Sampler samples nvidia-smi. SampleOnce and Run may be called from any
// goroutine (samples are taken one at a time); Latest from any goroutine at
// any time.
//
// Foreign processes: a compute process is the run's when it, or an ancestor
// (a child that left the group with setsid), is in the process group of a
// run in Config.Runs now or at the previous sample (a run that just ended
// may take a moment to leave the GPU). A zombie or exiting process is
// no one's. A pid that is gone by the time /proc is read is left out, so a
// process that exits between nvidia-smi's answer and /proc is never called
// foreign. A pid that nvidia-smi lists in two samples running but this
// worker's /proc lacks lives in another pid namespace (the worker is in a
// container without the host's, or /proc hides other users' processes): it
// is reported as foreign, Unresolved, only on a GPU no run was given,
// because on a run's GPU it may be that run's own process seen by its host
// pid; the Problem says detection is partial.
type Sampler struct {
	cfg   Config
	run   Runner
	procs procReader
	// procErr is why procs is nil.
	procErr error

	latest atomic.Pointer[Sample]

	mu sync.Mutex // held through a sample; guards the fields below
	// seq numbers the samples.
	seq uint64
	// problem is the last Problem reported to OnProblem.
	problem string
	// users caches uid → user name.
	users map[uint32]string
	// lastGroups are the run groups of the last sample's Config.Runs.
	lastGroups map[int]bool
	// unresolved holds the pids seen unresolved in the last sample.
	unresolved map[appKey]bool
	// lastGPUs are the indices of the last GPU answer, for the next
	// sample when nvidia-smi fails and Config.GPUs is nil.
	lastGPUs []int
}

type appKey struct {
	pid  int
	uuid string
}

// NewSampler returns a Sampler; it takes no sample until asked.
func NewSampler(cfg Config) *Sampler {
	if cfg.Bin == "" {
		cfg.Bin = BinFromEnv()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Runs == nil {
		cfg.Runs = func() []RunGroup { return nil }
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	s := &Sampler{cfg: cfg, run: cfg.Runner, users: map[uint32]string{}}
	if s.run == nil {
		s.run = Command(cfg.Bin, cfg.Timeout)
	}
	s.procs, s.procErr = newProcReader(cfg.ProcRoot)
	return s
}

// Latest returns the last sample, or nil before the first.
func (s *Sampler) Latest() *Sample {
	return s.latest.Load()
}

// Run samples every Interval, the first at once, until ctx is done.
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.SampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// SampleOnce takes a sample, publishes it as Latest and returns it; when
// ctx ends during the sample it returns nil and publishes nothing.
func (s *Sampler) SampleOnce(ctx context.Context) *Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var probs problems
	prev := s.latest.Load()
	smp := &Sample{At: s.cfg.Now()}

	gpuOut, err := s.run(ctx, GPUArgs)
	if ctx.Err() != nil {
		return nil
	}
	var parsed []GPU
	if err != nil {
		probs.add(err.Error())
	} else {
		var warns []string
		parsed, warns = ParseGPUs(gpuOut)
		probs.add(warns...)
	}
	smp.GPUs = s.gpuStatesLocked(parsed, err == nil, &probs)

	appsOK := false
	if err == nil {
		appOut, err := s.run(ctx, AppArgs)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			probs.add(err.Error())
		} else {
			apps, warns := ParseApps(appOut)
			probs.add(warns...)
			s.classifyLocked(smp, parsed, apps, &probs)
			appsOK = true
		}
	}
	if !appsOK && prev != nil {
		// No word on processes: keep the last one, so a GPU held by a
		// foreign process is not handed out because nvidia-smi failed.
		carryForeign(smp, prev)
	}

	s.seq++
	smp.Seq = s.seq
	smp.Problem = probs.String()
	smp.Apps = appsOK
	s.latest.Store(smp)
	if smp.Problem != s.problem {
		s.problem = smp.Problem
		if s.cfg.OnProblem != nil {
			s.cfg.OnProblem(smp.Problem)
		}
	}
	if s.cfg.OnSample != nil {
		s.cfg.OnSample(smp)
	}
	return smp
}

// gpuStatesLocked lays parsed out over the expected indices.
func (s *Sampler) gpuStatesLocked(parsed []GPU, answered bool, probs *problems) []GPUState {
	want := s.cfg.GPUs
	if want == nil {
		if answered {
			want = make([]int, 0, len(parsed))
			for _, g := range parsed {
				want = append(want, g.Index)
			}
			slices.Sort(want)
			s.lastGPUs = want
		} else {
			want = s.lastGPUs
		}
	}
	states := make([]GPUState, 0, len(want))
	for _, idx := range want {
		if i := indexOf(parsed, idx); i >= 0 {
			states = append(states, GPUState{GPU: parsed[i]})
			continue
		}
		if answered {
			probs.add(fmt.Sprintf("GPU %d is missing from nvidia-smi's answer", idx))
		}
		states = append(states, GPUState{GPU: GPU{Index: idx,
			MemoryTotalMB: Unknown, MemoryUsedMB: Unknown, UtilizationPct: Unknown}})
	}
	return states
}

// classifyLocked places each compute process in a run or in its GPU's
// foreign list.
func (s *Sampler) classifyLocked(smp *Sample, parsed []GPU, apps []App, probs *problems) {
	runs := s.cfg.Runs()
	ours := make(map[int]bool, len(runs))
	held := map[int]bool{} // GPU indices some run was given
	for _, r := range runs {
		ours[r.PGID] = true
		for _, g := range r.GPUs {
			held[g] = true
		}
	}
	for pgid := range s.lastGroups {
		ours[pgid] = true
	}
	helpers := map[int]bool{}
	if s.cfg.Helpers != nil {
		for _, pid := range s.cfg.Helpers() {
			helpers[pid] = true
		}
	}
	s.lastGroups = make(map[int]bool, len(runs))
	for _, r := range runs {
		s.lastGroups[r.PGID] = true
	}
	byUUID := make(map[string]int, len(smp.GPUs)) // → position in smp.GPUs
	for i, g := range smp.GPUs {
		if g.UUID != "" {
			byUUID[g.UUID] = i
		}
	}
	listed := make(map[string]bool, len(parsed))
	for _, g := range parsed {
		listed[g.UUID] = true
	}
	use := map[int]*RunUse{}
	unresolved := map[appKey]bool{}
	persistent := false
	for _, a := range apps {
		gi, ok := byUUID[a.GPUUUID]
		if !ok {
			if !listed[a.GPUUUID] { // on a GPU the worker does not advertise: not its business
				probs.add(fmt.Sprintf("nvidia-smi lists a process on GPU %s, which its GPU list lacks", a.GPUUUID))
			}
			continue
		}
		gpu := &smp.GPUs[gi]
		pgid, found, gone := s.ownerGroupLocked(a.PID, ours, helpers)
		switch {
		case gone:
			continue
		case !found:
			k := appKey{a.PID, a.GPUUUID}
			unresolved[k] = true
			if !s.unresolved[k] {
				continue // perhaps it just exited: wait for the next sample
			}
			persistent = true
			if !held[gpu.Index] {
				gpu.Foreign = append(gpu.Foreign, Process{PID: a.PID, MemoryMB: a.UsedMemoryMB, Unresolved: true})
			}
		case pgid != 0:
			u := use[pgid]
			if u == nil {
				u = &RunUse{PGID: pgid}
				use[pgid] = u
			}
			if !slices.Contains(u.GPUs, gpu.Index) {
				u.GPUs = append(u.GPUs, gpu.Index)
			}
			if a.UsedMemoryMB > 0 {
				u.MemoryMB += a.UsedMemoryMB
			}
		default:
			if p, ok := s.foreignLocked(a); ok {
				gpu.Foreign = append(gpu.Foreign, p)
			}
		}
	}
	s.unresolved = unresolved
	if persistent {
		why := "another pid namespace: run the worker with the host's, e.g. docker --pid=host"
		if s.procs == nil {
			why = s.procErr.Error()
		}
		probs.add("nvidia-smi lists processes this worker cannot find in /proc (" + why +
			"); they count as foreign only on GPUs no run holds")
	}
	for i := range smp.GPUs {
		slices.SortFunc(smp.GPUs[i].Foreign, func(a, b Process) int { return cmp.Compare(a.PID, b.PID) })
	}
	for _, u := range use {
		slices.Sort(u.GPUs)
		smp.Runs = append(smp.Runs, *u)
	}
	slices.SortFunc(smp.Runs, func(a, b RunUse) int { return cmp.Compare(a.PGID, b.PGID) })
}

// maxAncestors bounds the walk up the parent chain.
const maxAncestors = 32

// ownerGroupLocked finds the run group pid belongs to: pgid != 0 when it
// or an ancestor is in one of ours; found=false when pid is not in /proc;
// gone when it is exiting (a zombie) or vanished while being read, and
// also when it or an ancestor is one of the worker's helpers (neither a
// run's nor foreign: left out like a process that went).
func (s *Sampler) ownerGroupLocked(pid int, ours, helpers map[int]bool) (pgid int, found, gone bool) {
	if s.procs == nil {
		return 0, false, false
	}
	st, err := s.procs.stat(pid)
	if err != nil {
		return 0, false, false
	}
	if st.state == "Z" || st.state == "X" {
		return 0, true, true
	}
	for range maxAncestors {
		if helpers[pid] {
			return 0, true, true
		}
		if ours[st.pgid] {
			return st.pgid, true, false
		}
		if st.ppid <= 1 {
			break
		}
		pid = st.ppid
		if st, err = s.procs.stat(st.ppid); err != nil {
			break // the parent is gone: the chain ends here
		}
	}
	return 0, true, false
}

// foreignLocked reads who runs a foreign process; ok=false when it exited
// while being read.
func (s *Sampler) foreignLocked(a App) (Process, bool) {
	uid, err := s.procs.owner(a.PID)
	if err != nil {
		return Process{}, false
	}
	cmd, err := s.procs.cmdline(a.PID)
	if err != nil {
		return Process{}, false
	}
	if cmd = printable(cmd, maxCommand); cmd == "" {
		st, err := s.procs.stat(a.PID)
		if err != nil {
			return Process{}, false
		}
		cmd = printable("["+st.comm+"]", maxCommand)
	}
	return Process{PID: a.PID, User: s.userLocked(uid), Command: cmd, MemoryMB: a.UsedMemoryMB}, true
}

// maxUsers bounds the uid cache; past it the cache starts over.
const maxUsers = 1024

func (s *Sampler) userLocked(uid uint32) string {
	if name, ok := s.users[uid]; ok {
		return name
	}
	id := strconv.FormatUint(uint64(uid), 10)
	name := id
	if u, err := user.LookupId(id); err == nil && u.Username != "" {
		name = u.Username
	}
	if len(s.users) >= maxUsers {
		clear(s.users)
	}
	s.users[uid] = name
	return name
}

// carryForeign copies prev's foreign processes and run use into smp.
func carryForeign(smp, prev *Sample) {
	for i := range smp.GPUs {
		for _, p := range prev.GPUs {
			if p.Index == smp.GPUs[i].Index {
				smp.GPUs[i].Foreign = p.Foreign
			}
		}
	}
	smp.Runs = prev.Runs
}

// problems collects a sample's distinct problems in the order found.
type problems struct{ list []string }

func (p *problems) add(msgs ...string) {
	for _, m := range msgs {
		if !slices.Contains(p.list, m) {
			p.list = append(p.list, m)
		}
	}
}

func (p *problems) String() string {
	s := strings.Join(p.list, "; ")
	if len(s) > maxProblem {
		s = printable(s, maxProblem-len("…")) + "…"
	}
	return s
}

// SameForeign reports whether s and o list the same foreign processes on
// the same GPUs: the heartbeat resends the list only when it changed. A nil
// sample has none.
func (s *Sample) SameForeign(o *Sample) bool {
	var a, b []GPUState
	if s != nil {
		a = s.GPUs
	}
	if o != nil {
		b = o.GPUs
	}
	foreignOf := func(gs []GPUState) map[int][]Process {
		m := map[int][]Process{}
		for _, g := range gs {
			if len(g.Foreign) > 0 {
				m[g.Index] = g.Foreign
			}
		}
		return m
	}
	fa, fb := foreignOf(a), foreignOf(b)
	if len(fa) != len(fb) {
		return false
	}
	for idx, pa := range fa {
		if !slices.Equal(pa, fb[idx]) {
			return false
		}
	}
	return true
}
