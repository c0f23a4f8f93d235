package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rlsched/rlsched/worker/nvsmi"
)

// DetectGPUs lists this machine's GPUs with the GPU query of the sampler
// (nvsmi.GPUArgs: $NVIDIA_SMI, else nvidia-smi on PATH), so the GPUs a
// worker advertises and the ones it samples are the same rows. Without
// nvidia-smi it returns nil, nil: the caller then falls back to
// SyntheticGPUs (--gpus N) or to CPU slots. A GPU whose total memory is
// not reported gets 0.
func DetectGPUs() ([]GPU, error) {
	bin := nvsmi.BinFromEnv()
	if _, err := exec.LookPath(bin); err != nil {
		return nil, nil
	}
	out, err := nvsmi.Command(bin, nvsmi.DefaultTimeout)(context.Background(), nvsmi.GPUArgs)
	if err != nil {
		return nil, fmt.Errorf("cannot list GPUs: %w", err)
	}
	rows, warns := nvsmi.ParseGPUs(out)
	if len(rows) == 0 {
		if len(warns) > 0 {
			return nil, fmt.Errorf("cannot list GPUs: %s", warns[0])
		}
		return nil, errors.New("cannot list GPUs: nvidia-smi lists none")
	}
	// The cores near each GPU place a run's exclusive cores; unknown on a
	// driver that cannot tell (the run then gets the lowest free ones).
	var aff map[int]string
	if topo, err := nvsmi.Command(bin, nvsmi.DefaultTimeout)(context.Background(), nvsmi.TopoArgs); err == nil {
		aff = nvsmi.ParseTopo(topo)
	}
	minors := driverMinors(driverGPUsDir)
	gpus := make([]GPU, 0, len(rows))
	for _, g := range rows {
		minor, ok := minors[g.UUID]
		if !ok {
			minor = g.Index // the driver numbers its nodes in the same PCI order
		}
		gpus = append(gpus, GPU{Index: g.Index, UUID: g.UUID, Name: g.Name, MemoryMB: max(g.MemoryTotalMB, 0),
			CPUAffinity: aff[g.Index], Minor: minor})
	}
	return gpus, nil
}

// driverGPUsDir holds a directory per GPU whose "information" names its
// UUID and the minor of its /dev/nvidia<minor>.
const driverGPUsDir = "/proc/driver/nvidia/gpus"

// driverMinors maps GPU UUIDs to their device minors, as the driver says;
// empty where it is not loaded.
func driverMinors(dir string) map[string]int {
	out := map[string]int{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "information"))
		if err != nil {
			continue
		}
		var uuid string
		minor := -1
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "GPU UUID":
				uuid = strings.TrimSpace(v)
			case "Device Minor":
				minor, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if uuid != "" && minor >= 0 {
			out[uuid] = minor
		}
	}
	return out
}

// SyntheticGPUs returns n placeholder GPUs "gpu0".."gpu<n-1>" for --gpus N on
// a machine where nvidia-smi cannot list them.
func SyntheticGPUs(n int) []GPU {
	gpus := make([]GPU, 0, max(n, 0))
	for i := range n {
		gpus = append(gpus, GPU{Index: i, Name: "gpu" + strconv.Itoa(i), Minor: i})
	}
	return gpus
}
