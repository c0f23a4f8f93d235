package webtest

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/fakesmi"
)

// TestFleetGPUs: the Workers page is the fleet view: with a fake nvidia-smi,
// a GPU held by a process rlsched did not start is a red tile naming its pid,
// owner and command (the reader is an admin) and takes no run; the run on the
// other GPU, at 0 %, is marked idle; its page lists the idle_gpu warning and
// charts sys/gpu_utilization.
func TestFleetGPUs(t *testing.T) {
	needs(t)
	t.Parallel()
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(2, "Fake A100-SXM4-40GB")...)
	fake.SetMemoryUsed(0, 1536)
	other := exec.Command("sleep", "600")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	fake.SetProcs(fakesmi.Proc{GPUUUID: fakesmi.UUID(1), PID: other.Process.Pid, UsedMemoryMB: 1200})
	fake.SetUtil(1, 64)
	fake.SetMemoryUsed(1, 1200)

	s := startUp(t, -1, "NVIDIA_SMI="+fake.Bin, "GPU_SAMPLE_SECONDS=1", "IDLE_GPU_SECONDS=2", "IDLE_GPU_UTIL=5",
		"DEFAULT_CPUS_PER_GPU=1", "DEFAULT_MEMORY_MB_PER_GPU=4096")
	a := s.api().signup("gina") // the first user: an admin
	id := a.submit(map[string]any{"name": "idle-sleeper", "command": []string{"sleep", "600"}, "gpus": 1})
	t.Cleanup(func() { a.cancel(id) })
	tk := a.waitStatus(id, "RUNNING", 60*time.Second)
	if len(tk.GPUIndices) != 1 || tk.GPUIndices[0] != 0 {
		t.Fatalf("the run is on GPUs %v, want [0] (GPU 1 has a foreign process)", tk.GPUIndices)
	}

	b := newBrowser(t)
	b.signIn(s.url, "gina")
	b.click(`.mainnav a[href="/workers"]`)
	pid := fmt.Sprint(other.Process.Pid)
	b.wait("the foreign GPU tile", 20*time.Second, fmt.Sprintf(`(() => { const e = document.querySelector('#workers .gpu.foreign[data-gpu="1"] .foreign'); return e && e.textContent.includes('pid %s') && e.textContent.includes('sleep 600'); })()`, pid))
	b.wait("the idle run's tile", 30*time.Second, fmt.Sprintf(`document.querySelector('#workers .gpu.held.idle[data-task=%q] .idle-mark') !== null`, id))
	b.wait("utilisation bars", 20*time.Second, `document.querySelector('#workers .gpu[data-gpu="1"] .util[aria-valuenow="64"]') !== null`)
	tile := b.text(`#workers .gpu[data-gpu="1"]`)
	if !strings.Contains(tile, "not given to runs") || !strings.Contains(tile, "64 %") {
		t.Errorf("the foreign tile says %q", tile)
	}
	if held := b.text(fmt.Sprintf(`#workers .gpu[data-task=%q]`, id)); !strings.Contains(held, "idle-sleeper") || !strings.Contains(held, "1.5 GiB / 40 GiB") {
		t.Errorf("the held tile says %q, want the run and the memory used", held)
	}
	// Its cores and memory beside the GPUs, and how it enforces them.
	b.wait("the worker's cores and memory", 20*time.Second, `(() => { const e = document.querySelector('#workers .worker-resources'); return e && e.textContent.includes('enforcement:'); })()`)
	b.screenshot("20-fleet-gpus")

	b.open(s.url + "/runs/" + id)
	// What it got by the lab's defaults for its one GPU (DEFAULT_CPUS_PER_GPU, DEFAULT_MEMORY_MB_PER_GPU).
	b.wait("the run's cores and memory", 20*time.Second, `(() => { const c = document.querySelector('#run-cpus'), m = document.querySelector('#run-memory'); return c && m && c.textContent === '1' && m.textContent === '4.0 GiB'; })()`)
	b.wait("the idle_gpu warning", 20*time.Second, `(() => { const e = document.querySelector('#warnings li[data-code="idle_gpu"]'); return e && e.textContent.includes('GPU 0 idle'); })()`)
	b.wait("the GPU utilisation chart", 30*time.Second, `document.querySelector('#charts [data-chart="sys/gpu_utilization"] path.line') !== null`)
	b.screenshot("21-run-gpu-series")
}

// TestFleetGPUShares (issue 28): a GPU shared by fractional runs is drawn
// with each run's share and memory share (asked for, or the fraction of the
// GPU's memory), and the whole GPU beside it with its one run.
func TestFleetGPUShares(t *testing.T) {
	needs(t)
	t.Parallel()
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(2, "Fake A100-SXM4-40GB")...)
	s := startUp(t, -1, "NVIDIA_SMI="+fake.Bin, "GPU_SAMPLE_SECONDS=1", "DEFAULT_CPUS_PER_GPU=1", "DEFAULT_MEMORY_MB_PER_GPU=1024")
	a := s.api().signup("gina")
	whole := a.submit(map[string]any{"name": "whole", "command": []string{"sleep", "600"}, "gpus": 1})
	t.Cleanup(func() { a.cancel(whole) })
	a.waitStatus(whole, "RUNNING", 60*time.Second)
	var quarters []string
	for i, mb := range []int{4096, 0} { // the second gets a quarter of the GPU's memory
		id := a.submit(map[string]any{"name": fmt.Sprint("quarter", i), "command": []string{"sleep", "600"}, "gpus": 0.25, "gpuMemoryMb": mb})
		t.Cleanup(func() { a.cancel(id) })
		a.waitStatus(id, "RUNNING", 60*time.Second)
		quarters = append(quarters, id)
	}

	b := newBrowser(t)
	b.signIn(s.url, "gina")
	b.click(`.mainnav a[href="/workers"]`)
	b.wait("the shared GPU's two runs", 20*time.Second, `document.querySelectorAll('#workers .gpu.shared .shares li').length === 2`)
	for i, want := range []string{"25 % · 4.0 GiB", "25 % · 10 GiB"} {
		// The run's name comes from a fetch of its own, after the tile.
		sel := fmt.Sprintf(`#workers .gpu.shared .shares li[data-task=%q]`, quarters[i])
		b.wait("the share's run name", 20*time.Second, fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e && e.textContent.includes(%q); })()`, sel, fmt.Sprint("quarter", i)))
		got := b.text(fmt.Sprintf(`#workers .gpu.shared .shares li[data-task=%q]`, quarters[i]))
		if !strings.Contains(got, want) || !strings.Contains(got, fmt.Sprint("quarter", i)) {
			t.Errorf("share of %s drawn %q, want %q and its name", quarters[i], got, want)
		}
	}
	if got := b.text(fmt.Sprintf(`#workers .gpu.held:not(.shared)[data-task=%q]`, whole)); !strings.Contains(got, "whole") {
		t.Errorf("the whole GPU's tile says %q", got)
	}
	b.screenshot("22-fleet-gpu-shares")
}
