package worker

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"

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
	gpus := make([]GPU, 0, len(rows))
	for _, g := range rows {
		gpus = append(gpus, GPU{Index: g.Index, UUID: g.UUID, Name: g.Name, MemoryMB: max(g.MemoryTotalMB, 0)})
	}
	return gpus, nil
}

// SyntheticGPUs returns n placeholder GPUs "gpu0".."gpu<n-1>" for --gpus N on
// a machine where nvidia-smi cannot list them.
func SyntheticGPUs(n int) []GPU {
	gpus := make([]GPU, 0, max(n, 0))
	for i := range n {
		gpus = append(gpus, GPU{Index: i, Name: "gpu" + strconv.Itoa(i)})
	}
	return gpus
}
