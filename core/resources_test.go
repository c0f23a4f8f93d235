package core

import (
	"strings"
	"testing"
	"time"
)

func TestUsageWeight(t *testing.T) {
	f := func(gpus, cpus, want float64) {
		t.Helper()
		if got := UsageWeight(gpus, cpus); got != want {
			t.Fatalf("UsageWeight(%v, %v) = %v, want %v", gpus, cpus, got, want)
		}
	}
	f(2, 16, 2)
	f(0.25, 4, 0.25) // a quarter of a GPU counts a quarter (issue 28)
	f(0, 4, 4*CPURunWeight)
	f(0, 0.5, 0.5*CPURunWeight)
	f(0, 0, CPURunWeight) // a run from before cores were asked for
}

func TestResourceDefaults(t *testing.T) {
	d := ResourceDefaults{CPUsPerGPU: 2.5, MemoryMBPerGPU: 8192, CPUs: 0.5, MemoryMB: 1024}
	f := func(in Task, cpus float64, mem int64) {
		t.Helper()
		d.Fill(&in)
		if in.CPUs != cpus || in.MemoryMB != mem {
			t.Fatalf("got %v cores %d MiB, want %v %d", in.CPUs, in.MemoryMB, cpus, mem)
		}
	}
	f(Task{}, 0.5, 1024)
	f(Task{GPUs: 3}, 7.5, 24576)
	f(Task{GPUs: 3, CPUs: 1}, 1, 24576)
	f(Task{MemoryMB: 77}, 0.5, 77)
	(&ResourceDefaults{}).Fill(&Task{}) // no defaults: nothing to fill
	for _, bad := range []ResourceDefaults{{CPUs: -1}, {CPUsPerGPU: 5000}, {MemoryMB: 1}, {MemoryMBPerGPU: -3}} {
		if err := bad.Check(); err == nil || !strings.Contains(err.Error(), "DEFAULT_") {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
	if err := (ResourceDefaults{}).Check(); err != nil {
		t.Fatalf("no defaults: %v", err)
	}
	if err := DefaultResources.Check(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
}

func TestResourceWords(t *testing.T) {
	f := func(got, want string) {
		t.Helper()
		if got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	f(FormatMB(512), "512 MiB")
	f(FormatMB(4096), "4 GiB")
	f(FormatMB(4198), "4.1 GiB")
	f(FormatMB(3<<20), "3 TiB")
	f(FormatCPUs(0.5), "0.5")
	f(FormatCPUs(2), "2")
	f(OutOfMemoryError(4198, 4096), "out of memory: used 4.1 GiB of its 4 GiB limit; ask for more with --memory")
	f(OutOfMemoryError(0, 4096), "out of memory: used 4 GiB of its 4 GiB limit; ask for more with --memory")
	f(OutOfMemoryError(900, 0), "out of memory: ask for more with --memory")
}

func TestUsageOf(t *testing.T) {
	st := time.Unix(1000, 0)
	end := st.Add(90 * time.Second)
	u := UsageOf(&Task{GPUs: 2, StartedAt: &st, FinishedAt: &end}, 12.5, 300)
	if u == nil || *u != (Usage{CPUSeconds: 12.5, PeakMemoryMB: 300, GPUSeconds: 180}) {
		t.Fatalf("usage %+v", u)
	}
	if UsageOf(&Task{GPUs: 2, FinishedAt: &end}, 1, 1) != nil {
		t.Fatal("a run that never started has usage")
	}
}
