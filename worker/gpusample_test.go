package worker

import (
	"os/exec"
	"os/user"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/fakesmi"
)

// foreignOf is what the master keeps of the samples: each sample's foreign
// list replaces the last, a sample without one leaves it.
func foreignOf(samples []*pb.GpuSample) []*pb.ForeignProc {
	var last []*pb.ForeignProc
	for _, s := range samples {
		if s.Foreign != nil {
			last = s.Foreign.Procs
		}
	}
	return last
}

// A worker with a fake nvidia-smi sends its samples in heartbeats: the
// values positionally, a process it did not start as foreign (with its
// owner and command), its own run's process not, the foreign list and the
// problem only when they change.
func TestGPUSamplesInHeartbeats(t *testing.T) {
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(2, "NVIDIA A100")...)
	fake.SetUtil(0, 42)
	fake.SetMemoryUsed(1, 1234)
	t.Setenv("NVIDIA_SMI", fake.Bin)
	gpus, err := DetectGPUs()
	if err != nil || len(gpus) != 2 {
		t.Fatalf("DetectGPUs: %v %v", gpus, err)
	}

	other := exec.Command("sleep", "60") // started by no run: foreign
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	foreign := fakesmi.Proc{GPUUUID: fakesmi.UUID(1), PID: other.Process.Pid, UsedMemoryMB: 1200}
	fake.SetProcs(foreign)

	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) { c.GPUs, c.GPUSample = gpus, 50*time.Millisecond })
	mc := m.next(t)
	if h := mc.hello.GetGpus(); len(h) != 2 || h[1].GetUuid() != fakesmi.UUID(1) {
		t.Fatalf("Hello.gpus: %v", h)
	}
	me, _ := user.Current()
	waitFor(t, 10*time.Second, "a sample with the foreign process", func() bool {
		f := foreignOf(mc.gpuSamples())
		return len(f) == 1 && f[0].GetPid() == uint32(other.Process.Pid)
	})
	samples := mc.gpuSamples()
	first, last := samples[0], samples[len(samples)-1]
	if first.Problem == nil || *first.Problem != "" || first.Foreign == nil {
		t.Fatalf("the first sample must carry the problem and the foreign list: %v", first)
	}
	if last.UtilPct[0] != 42 || last.MemoryUsedMb[1] != 1234 {
		t.Fatalf("values: %v", last)
	}
	p := foreignOf(samples)[0]
	if p.GetGpuIndex() != 1 || p.GetMemoryMb() != 1200 || !strings.HasPrefix(p.GetCommand(), "sleep 60") ||
		(p.GetUser() != me.Username && p.GetUser() != me.Uid) {
		t.Fatalf("foreign process %v", p)
	}

	// A run of this worker on GPU 0: its process is not foreign.
	mc.send(&pb.ExecuteTask{TaskId: "t-gpu", Attempt: 1, Fence: 3, Argv: []string{"sleep", "30"}, GpuIndices: []int32{0}})
	st := mc.started(t, "t-gpu")
	fake.SetProcs(foreign, fakesmi.Proc{GPUUUID: fakesmi.UUID(0), PID: int(st.GetPid()), UsedMemoryMB: 500})
	n := len(mc.gpuSamples())
	waitFor(t, 10*time.Second, "five more samples", func() bool { return len(mc.gpuSamples()) >= n+5 })
	if f := foreignOf(mc.gpuSamples()); len(f) != 1 || f[0].GetPid() != uint32(other.Process.Pid) {
		t.Fatalf("with the run's process on GPU 0, foreign = %v", f)
	}
	for _, s := range mc.gpuSamples()[n+1:] {
		if s.Foreign != nil && len(s.Foreign.Procs) != 1 {
			t.Fatalf("a sample lists %v", s.Foreign)
		}
	}

	// The foreign process goes: an empty list is sent.
	fake.SetProcs(fakesmi.Proc{GPUUUID: fakesmi.UUID(0), PID: int(st.GetPid()), UsedMemoryMB: 500})
	waitFor(t, 10*time.Second, "the foreign list emptied", func() bool {
		s := mc.gpuSamples()
		return s[len(s)-1].Foreign != nil && len(foreignOf(s)) == 0
	})

	// nvidia-smi fails: the problem is sent once, values unknown; no crash.
	fake.SetBehaviour(fakesmi.QueryGPU, fakesmi.Behaviour{Exit: 9, Stdout: "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error"})
	n = len(mc.gpuSamples())
	waitFor(t, 10*time.Second, "the problem and three more samples", func() bool {
		s := mc.gpuSamples()
		if len(s) < n+4 {
			return false
		}
		probs := 0
		for _, x := range s[n:] {
			if x.Problem != nil {
				probs++
			}
		}
		if probs != 1 {
			t.Fatalf("want the problem once, got it %d times in %d samples", probs, len(s)-n)
		}
		return true
	})
	s := mc.gpuSamples()
	if l := s[len(s)-1]; l.UtilPct[0] != utilUnknown || l.MemoryUsedMb[0] != memUnknown {
		t.Fatalf("values while nvidia-smi fails: %v", l)
	}
	for _, x := range s[n:] {
		if x.Problem != nil && !strings.Contains(*x.Problem, "exit status 9") {
			t.Fatalf("problem %q", *x.Problem)
		}
	}
}
