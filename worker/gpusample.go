package worker

import (
	"context"
	"math"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/worker/nvsmi"
)

// The worker's side of "GPUs watched" (docs/gpus.md): a Sampler runs the two
// nvidia-smi queries every Config.GPUSample, and each heartbeat after a new
// sample carries it as a GpuSample, positional over Hello.gpus, with the
// foreign processes and the problem only when they changed on the session.

// Wire values of a GpuSample for "not reported".
const (
	utilUnknown = 255
	memUnknown  = 1<<32 - 1
)

// startSampler starts sampling when the worker has GPUs; nil when it does
// not sample. The sampler's goroutine ends with ctx.
func (a *agent) startSampler(ctx context.Context) *nvsmi.Sampler {
	if len(a.cfg.GPUs) > 0 && a.cfg.GPUSample < 0 && a.cfg.GPUSharing == SharingTimeslice {
		a.log.Warn().Msg("GPU_SAMPLE_SECONDS=0: no GPU samples, so nothing stops a fractional run that takes more than its GPU memory share")
	}
	if len(a.cfg.GPUs) == 0 || a.cfg.GPUSample < 0 {
		return nil
	}
	idx := make([]int, len(a.cfg.GPUs))
	for i, g := range a.cfg.GPUs {
		idx[i] = g.Index
	}
	s := nvsmi.NewSampler(nvsmi.Config{Bin: a.cfg.NvidiaSMI, Interval: a.cfg.GPUSample, GPUs: idx,
		Runs: a.tab.groups, OnProblem: a.gpuProblem, OnSample: a.watchGPUs, Now: a.cfg.now, Helpers: a.mps.daemons})
	go s.Run(ctx)
	return s
}

// gpuProblem logs a change of the sampler's problem: once per fault, never
// once per sample (the sampler calls it only on a change). The master hears
// of it in the next heartbeat and shows it on the worker.
func (a *agent) gpuProblem(problem string) {
	if problem == "" {
		a.log.Info().Msg("GPU sampling works again")
		return
	}
	a.log.Warn().Str("problem", problem).Msg("GPU sampling is incomplete")
}

// gpuSample is the GpuSample the next heartbeat of s carries: nil when no
// sample was taken since the last one s sent. The runs' use of cores and
// memory is read with each GPU sample; a worker that samples no GPUs
// (none, or no sampler) sends it alone every GPU_SAMPLE_SECONDS, when a
// run has a group to read. Heartbeat goroutine only.
func (s *session) gpuSample() *pb.GpuSample {
	if s.a.sampler == nil {
		if len(s.a.cfg.GPUs) > 0 || s.a.cfg.GPUSample <= 0 {
			return nil
		}
		now := time.Now()
		if !s.usageAt.IsZero() && now.Sub(s.usageAt) < s.a.cfg.GPUSample {
			return nil
		}
		s.usageAt = now // a run's first sample marks its count: its next is an interval on
		runs := s.a.tab.usage(now)
		if len(runs) == 0 {
			return nil
		}
		return &pb.GpuSample{Runs: runs}
	}
	smp := s.a.sampler.Latest()
	if smp == nil || smp.Seq == s.gpuSeq {
		return nil
	}
	m := &pb.GpuSample{UtilPct: make([]uint32, len(smp.GPUs)), MemoryUsedMb: make([]uint32, len(smp.GPUs)),
		Runs: s.a.tab.usage(time.Now())}
	for i, g := range smp.GPUs {
		m.UtilPct[i], m.MemoryUsedMb[i] = utilUnknown, memUnknown
		if g.UtilizationPct >= 0 && g.UtilizationPct <= 100 {
			m.UtilPct[i] = uint32(g.UtilizationPct)
		}
		if g.MemoryUsedMB >= 0 && g.MemoryUsedMB < memUnknown {
			m.MemoryUsedMb[i] = uint32(g.MemoryUsedMB)
		}
	}
	first := s.gpuSeq == 0
	if first || !smp.SameForeign(s.gpuSent) {
		m.Foreign = &pb.ForeignList{}
		for _, g := range smp.GPUs {
			for _, p := range g.Foreign {
				mem := uint32(memUnknown)
				if p.MemoryMB >= 0 && p.MemoryMB < memUnknown {
					mem = uint32(p.MemoryMB)
				}
				m.Foreign.Procs = append(m.Foreign.Procs, &pb.ForeignProc{GpuIndex: uint32(g.Index), Pid: uint32(p.PID),
					User: p.User, Command: p.Command, MemoryMb: mem})
			}
		}
	}
	if first || s.gpuSent == nil || smp.Problem != s.gpuSent.Problem {
		m.Problem = &smp.Problem
	}
	s.gpuSeq, s.gpuSent = smp.Seq, smp
	return m
}

// heartbeatDropped: the last heartbeat built for s was not sent, so its
// sample may have carried a change the master never sees: the next one
// sends everything again. Heartbeat goroutine only.
func (s *session) heartbeatDropped() {
	s.gpuSeq, s.gpuSent = 0, nil
}

// usage reads the group of every started run at now: the cores it used
// since its last sample and the memory it holds. A run's first sample only
// marks where its count stands (its group counts from the fork, before the
// worker notes the start, so a rate since the start would be too high). A
// run without a group is left out: without one its processes may leave its
// process group, so nothing counts all of them.
func (t *runTable) usage(now time.Time) []*pb.RunUsage {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*pb.RunUsage
	for _, r := range t.runs {
		// startedAt first: a run is in the table before its group is made
		// while its files are restored, and r.cg is set before its start.
		if r.startedAt.IsZero() || r.reaped || r.cg == nil {
			continue
		}
		n := r.cg.Now()
		if n.CPUNanos < 0 || n.MemoryBytes < 0 {
			continue
		}
		if r.usedAt.IsZero() {
			r.usedAt, r.usedNanos = now, n.CPUNanos
			continue
		}
		d, base := now.Sub(r.usedAt), r.usedNanos
		if d <= 0 {
			continue
		}
		r.usedAt, r.usedNanos = now, n.CPUNanos
		milli := math.Round(float64(max(n.CPUNanos-base, 0)) * 1000 / float64(d))
		out = append(out, &pb.RunUsage{TaskId: r.id, CpuMillicores: uint32(min(milli, math.MaxUint32)),
			MemoryMb: uint64(n.MemoryBytes+1<<20-1) >> 20})
	}
	return out
}
