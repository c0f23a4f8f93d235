package worker

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/fakesmi"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// The Hello carries the operator's labels and the automatic ones, under
// the keys the master's placement matches on.
func TestLabelsInHello(t *testing.T) {
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(2, "NVIDIA A100-SXM4-40GB")...)
	t.Setenv("NVIDIA_SMI", fake.Bin)
	gpus, err := DetectGPUs()
	if err != nil || len(gpus) != 2 {
		t.Fatalf("DetectGPUs: %v %v", gpus, err)
	}
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) {
		c.GPUs, c.GPUSample, c.Host = gpus, -1, "gpu-host-1"
		c.Labels = map[string]string{"pool": "a100", "zone/rack": "r 12"}
	})
	got := m.next(t).hello.GetLabels()
	want := map[string]string{"pool": "a100", "zone/rack": "r 12", core.LabelGPUType: "NVIDIA A100-SXM4-40GB",
		core.LabelGPUCount: "2", core.LabelCPUCount: strconv.Itoa(len(affinity())), core.LabelHost: "gpu-host-1"}
	if len(got) != len(want) {
		t.Fatalf("labels %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("label %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}

	// Synthetic GPUs (--gpus N) have no name nvidia-smi gave: no gpu.type.
	m2 := newFakeMaster(t, testToken)
	startWorker(t, m2, nil)
	l := m2.next(t).hello.GetLabels()
	if _, ok := l[core.LabelGPUType]; ok || l[core.LabelGPUCount] != "2" {
		t.Fatalf("labels with synthetic GPUs: %v", l)
	}
}

// GPU_SHARING=mps says so in gpu.sharing, and whether an MPS GPU serves one
// user's runs at a time (RUN_AS=user: a uid per user), which the master's
// placement keeps to; time-slicing sets no label.
func TestLabelsGPUSharing(t *testing.T) {
	for _, c := range []struct{ sharing, runAs, want string }{
		{SharingMPS, RunAsUser, core.SharingMPSPerUser}, {SharingMPS, RunAsNone, SharingMPS}, {SharingTimeslice, RunAsUser, ""},
	} {
		if got := helloLabels(Config{GPUSharing: c.sharing, RunAs: c.runAs}, 1)[core.LabelGPUSharing]; got != c.want {
			t.Errorf("GPU_SHARING=%q RUN_AS=%s: gpu.sharing %q, want %q", c.sharing, c.runAs, got, c.want)
		}
	}
}

func TestLabels_Refused(t *testing.T) {
	f := func(labels map[string]string, want string) {
		t.Helper()
		cfg := Config{ID: "w1", Masters: []string{"127.0.0.1:1"}, JoinToken: testToken,
			DataDir: testutil.ReachableTempDir(t), Labels: labels}
		w, err := Start(context.Background(), cfg)
		if err == nil {
			w.Close(context.Background())
			t.Fatalf("labels %v: the worker started", labels)
		}
		if !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "cannot start worker: ") {
			t.Fatalf("labels %v: %v, want %q", labels, err, want)
		}
	}
	f(map[string]string{"Pool": "a"}, `label key "Pool" must match [a-z0-9._/-]{1,63}`)
	f(map[string]string{"": "a"}, `label key ""`)
	f(map[string]string{strings.Repeat("k", 64): "a"}, "must match")
	f(map[string]string{"pool": strings.Repeat("v", 129)}, "a value of 129 bytes, at most 128")
	f(map[string]string{"pool": "a\tb"}, "not printable")
	f(map[string]string{"gpu.type": "A100"}, `label "gpu.type" is set by the worker itself`)
	f(map[string]string{"host": "x"}, "set by the worker itself")
	f(map[string]string{"gpu.sharing": "mps"}, "set by the worker itself")

	for _, kv := range []string{"pool", "=a", "POOL=a"} {
		if _, _, err := ParseLabel(kv); err == nil {
			t.Errorf("ParseLabel(%q) accepted", kv)
		}
	}
	if k, v, err := ParseLabel("pool=a=b"); err != nil || k != "pool" || v != "a=b" {
		t.Errorf("ParseLabel(pool=a=b) = %q %q %v", k, v, err)
	}
}

// startFailed waits for id's report, which must be START_FAILED naming want.
func startFailed(t *testing.T, mc *masterConn, id, want string) {
	t.Helper()
	msg := mc.expect(t, 10*time.Second, "report of "+id, func(m proto.Message) bool {
		switch m := m.(type) {
		case *pb.TaskStarted:
			return m.GetTaskId() == id
		case *pb.TaskFinished:
			return m.GetTaskId() == id
		}
		return false
	})
	fin, ok := msg.(*pb.TaskFinished)
	if !ok || fin.GetOutcome() != pb.Outcome_OUTCOME_START_FAILED || !strings.Contains(fin.GetError(), want) {
		t.Fatalf("%s: %v, want START_FAILED with %q", id, msg, want)
	}
	mc.send(&pb.TaskFinishedAck{TaskId: id, Attempt: 1})
}

// Four quarter runs share GPU 0 and see their share; a whole run on it is
// refused, as is a fractional run on the GPU a whole run holds.
func TestFractionalRunsShareAGPU(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) { c.Slots = 8 })
	mc := m.next(t)
	sleeper := []string{"sh", "-c", `env | grep -E '^(CUDA_VISIBLE_DEVICES|RLSCHED_GPU_)' | sort; echo ready; exec sleep 60`}
	for i := range 4 {
		id := "q" + strconv.Itoa(i)
		mc.send(&pb.ExecuteTask{TaskId: id, Attempt: 1, Fence: 1, Argv: sleeper, GpuIndices: []int32{0},
			GpuFraction: 0.25, GpuMemoryMb: 4096})
		mc.started(t, id)
	}
	for i := range 4 {
		id := "q" + strconv.Itoa(i)
		waitFor(t, 10*time.Second, "the env of "+id, func() bool { return strings.Contains(m.log(id, 1), "ready") })
		if got, want := m.log(id, 1), "CUDA_VISIBLE_DEVICES=0\nRLSCHED_GPU_FRACTION=0.25\nRLSCHED_GPU_MEMORY_MB=4096\nready\n"; got != want {
			t.Fatalf("%s sees\n%s\nwant\n%s", id, got, want)
		}
	}
	mc.send(&pb.ExecuteTask{TaskId: "whole0", Attempt: 1, Fence: 1, Argv: sleeper, GpuIndices: []int32{0}})
	startFailed(t, mc, "whole0", "a whole-GPU run shares its GPU with no other run")

	mc.send(&pb.ExecuteTask{TaskId: "whole1", Attempt: 1, Fence: 1, Argv: sleeper, GpuIndices: []int32{1}})
	mc.started(t, "whole1")
	waitFor(t, 10*time.Second, "the env of whole1", func() bool { return strings.Contains(m.log("whole1", 1), "ready") })
	if got := m.log("whole1", 1); got != "CUDA_VISIBLE_DEVICES=1\nready\n" {
		t.Fatalf("a whole run sees %q", got)
	}
	mc.send(&pb.ExecuteTask{TaskId: "q-on-1", Attempt: 1, Fence: 1, Argv: sleeper, GpuIndices: []int32{1}, GpuFraction: 0.5})
	startFailed(t, mc, "q-on-1", "held whole by run whole1")
	mc.send(&pb.ExecuteTask{TaskId: "whole1b", Attempt: 1, Fence: 1, Argv: sleeper, GpuIndices: []int32{1}})
	startFailed(t, mc, "whole1b", "GPU 1 is held by run whole1; a whole-GPU run shares its GPU with no other run")

	// A quarter ends: its share is free again, and the GPU is still shared.
	mc.send(&pb.CancelTask{TaskId: "q0", Attempt: 1, Fence: 1})
	mc.finished(t, "q0", 10*time.Second)
	mc.send(&pb.TaskFinishedAck{TaskId: "q0", Attempt: 1})
	mc.send(&pb.ExecuteTask{TaskId: "q4", Attempt: 1, Fence: 1, Argv: sleeper, GpuIndices: []int32{0}, GpuFraction: 0.25})
	mc.started(t, "q4")
}

func TestFractional_BadInput(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	f := func(id string, gpus []int32, fraction float64, mem int64, want string) {
		t.Helper()
		mc.send(&pb.ExecuteTask{TaskId: id, Attempt: 1, Fence: 1, Argv: []string{"true"}, GpuIndices: gpus,
			GpuFraction: fraction, GpuMemoryMb: mem})
		startFailed(t, mc, id, want)
	}
	f("two-gpus", []int32{0, 1}, 0.5, 0, "names 2 GPUs: a fractional run has exactly one")
	f("no-gpu", nil, 0.5, 0, "names 0 GPUs")
	f("one", []int32{0}, 1, 0, "invalid gpu_fraction 1")
	f("negative", []int32{0}, -0.25, 0, "invalid gpu_fraction -0.25")
	f("mem", []int32{0}, 0.25, -1, "invalid gpu_memory_mb -1")
	mc.send(&pb.ExecuteTask{TaskId: "mps-env", Attempt: 1, Fence: 1, Argv: []string{"true"}, GpuIndices: []int32{0},
		GpuFraction: 0.25, Env: map[string]string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=80G"}})
	startFailed(t, mc, "mps-env", "leave the run's share of an MPS GPU")
}
