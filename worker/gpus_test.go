package worker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/rlsched/rlsched/internal/testkit/fakesmi"
	"github.com/rlsched/rlsched/worker/nvsmi"
)

func TestDetectGPUs(t *testing.T) {
	fake := fakesmi.Install(t)
	gpus := fakesmi.GPUs(2, "NVIDIA A100-SXM4-40GB")
	gpus[1].Name = "Odd, Name" // the one field that may hold a comma
	gpus[1].Raw = map[string]string{"memory.total": "[N/A]"}
	gpus[0].CPUAffinity = "0-15,32-47"
	fake.SetGPUs(gpus...)
	t.Setenv("NVIDIA_SMI", fake.Bin)
	got, err := DetectGPUs()
	want := []GPU{{Index: 0, UUID: fakesmi.UUID(0), Name: "NVIDIA A100-SXM4-40GB", MemoryMB: 40960, CPUAffinity: "0-15,32-47"},
		{Index: 1, UUID: fakesmi.UUID(1), Name: "Odd, Name", MemoryMB: 0, Minor: 1}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("DetectGPUs() = %+v, %v\nwant %+v", got, err, want)
	}

	fake.SetBehaviour(fakesmi.QueryGPU, fakesmi.Behaviour{Exit: 9, Stdout: "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error"})
	if got, err := DetectGPUs(); err == nil || got != nil {
		t.Fatalf("a failing nvidia-smi: DetectGPUs() = %+v, %v; want an error", got, err)
	}

	t.Setenv("NVIDIA_SMI", filepath.Join(t.TempDir(), "nvidia-smi"))
	if got, err := DetectGPUs(); err != nil || got != nil {
		t.Fatalf("no nvidia-smi: DetectGPUs() = %+v, %v; want nil, nil", got, err)
	}
}

// TestDriverMinors: the device minor of each GPU is the driver's, by UUID.
func TestDriverMinors(t *testing.T) {
	dir := t.TempDir()
	for bus, info := range map[string]string{
		"0000:3b:00.0": "Model: \t\t NVIDIA H100\nIRQ:   123\nGPU UUID: \t GPU-aaa\nDevice Minor: \t 1\n",
		"0000:86:00.0": "GPU UUID: GPU-bbb\nDevice Minor: 0\n",
		"0000:99:00.0": "garbage",
	} {
		if err := os.MkdirAll(filepath.Join(dir, bus), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, bus, "information"), []byte(info), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := driverMinors(dir); !reflect.DeepEqual(got, map[string]int{"GPU-aaa": 1, "GPU-bbb": 0}) {
		t.Fatalf("driverMinors = %v", got)
	}
}

func TestSyntheticGPUs(t *testing.T) {
	want := []GPU{{Index: 0, Name: "gpu0"}, {Index: 1, Name: "gpu1", Minor: 1}, {Index: 2, Name: "gpu2", Minor: 2}}
	if got := SyntheticGPUs(3); !reflect.DeepEqual(got, want) {
		t.Fatalf("SyntheticGPUs(3) = %+v", got)
	}
	if got := SyntheticGPUs(0); len(got) != 0 {
		t.Fatalf("SyntheticGPUs(0) = %+v", got)
	}
}

func TestSignalName(t *testing.T) {
	if got := signalName(syscall.SIGKILL); got != "SIGKILL" {
		t.Fatalf("SIGKILL: %q", got)
	}
	if got := signalName(syscall.SIGTERM); got != "SIGTERM" {
		t.Fatalf("SIGTERM: %q", got)
	}
	if got := signalName(syscall.Signal(40)); got != "SIG40" {
		t.Fatalf("40: %q", got)
	}
}

// TestRealGPUs runs only where a real nvidia-smi answers (`nvidia-smi -L`):
// the GPUs are detected with UUIDs and a sample of them is complete.
func TestRealGPUs(t *testing.T) {
	if err := exec.Command("nvidia-smi", "-L").Run(); err != nil {
		t.Skipf("no real GPU here (nvidia-smi -L: %v); the fake nvidia-smi tests cover the rest", err)
	}
	t.Setenv("NVIDIA_SMI", "")
	gpus, err := DetectGPUs()
	if err != nil || len(gpus) == 0 {
		t.Fatalf("DetectGPUs() = %v, %v", gpus, err)
	}
	idx := make([]int, len(gpus))
	for i, g := range gpus {
		if !strings.HasPrefix(g.UUID, "GPU-") || g.MemoryMB <= 0 {
			t.Errorf("GPU %+v", g)
		}
		idx[i] = g.Index
	}
	smp := nvsmi.NewSampler(nvsmi.Config{GPUs: idx}).SampleOnce(context.Background())
	if smp == nil || smp.Problem != "" {
		t.Fatalf("a sample of the real GPUs: %+v", smp)
	}
	t.Logf("real GPUs: %+v; sample %+v", gpus, smp.GPUs)
}
