package worker

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/rlsched/rlsched/worker/cgroup"
)

// offer is what the worker offers runs (Hello.cpu_millis, memory_mb): the
// machine less what is reserved for the system and the worker.
type offer struct {
	all       []int // the cores the process may run on, ascending
	cores     []int // the cores runs may use, ascending
	cpuMillis int64
	memoryMB  int64 // 0: unknown
}

// machineOffer reads the cores this process may run on and the machine's
// memory, and takes the reserve off.
func machineOffer(c Config) (offer, error) {
	all := startAffinity
	reserved := int(c.ReservedCPUs) // whole cores leave the cpuset; a fraction only the count
	if c.ReservedCPUs >= float64(len(all)) {
		return offer{}, fmt.Errorf("cannot start worker: RESERVED_CPUS=%v leaves none of the %d cores for runs; reserve fewer", c.ReservedCPUs, len(all))
	}
	o := offer{all: all, cores: all[reserved:], cpuMillis: int64(math.Round((float64(len(all)) - c.ReservedCPUs) * 1000))}
	total := memTotalMB()
	if total <= 0 {
		return o, nil
	}
	keep := c.ReservedMemoryMB
	switch {
	case keep == 0:
		keep = min(max(total/20, 512), 4096)
	case keep < 0:
		keep = 0
	}
	if keep >= total {
		return offer{}, fmt.Errorf("cannot start worker: RESERVED_MEMORY_MB=%d leaves none of the machine's %d MiB for runs; reserve less", keep, total)
	}
	o.memoryMB = total - keep
	return o, nil
}

// startAffinity is read once, as the process starts: a worker keeps
// itself off the cores its runs hold alone (cgroup.Options.Self), and a
// second worker of the same process (tests, `up`) must not take what is
// left then for the machine.
var startAffinity = affinity()

// affinity lists the cores this process may run on (its cpuset).
func affinity() []int {
	b, err := os.ReadFile("/proc/self/status")
	if err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Cpus_allowed_list:"); ok {
				if cores, err := cgroup.ParseList(v); err == nil && len(cores) > 0 {
					return cores
				}
			}
		}
	}
	cores := make([]int, runtime.NumCPU())
	for i := range cores {
		cores[i] = i
	}
	return cores
}

// memTotalMB is /proc/meminfo's MemTotal in MiB; 0 when unknown.
func memTotalMB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb >> 10
			}
		}
	}
	return 0
}

// cgroupGPUs are the machine's GPUs as device nodes for worker/cgroup.
func cgroupGPUs(gpus []GPU) []cgroup.GPU {
	out := make([]cgroup.GPU, len(gpus))
	for i, g := range gpus {
		out[i] = cgroup.GPU{Index: g.Index, Minor: g.Minor}
	}
	return out
}

// nearCores are the cores near the GPUs of a run (their CPU affinity).
func nearCores(gpus []GPU, run []int) []int {
	var near []int
	for _, g := range gpus {
		for _, i := range run {
			if g.Index == i && g.CPUAffinity != "" {
				if c, err := cgroup.ParseList(g.CPUAffinity); err == nil {
					near = append(near, c...)
				}
			}
		}
	}
	return near
}
