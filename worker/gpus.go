package worker

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// DetectGPUs lists this machine's GPUs with nvidia-smi. Without nvidia-smi it
// returns nil, nil: the caller then falls back to SyntheticGPUs (--gpus N) or
// to CPU slots.
func DetectGPUs() ([]GPU, error) {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--query-gpu=index,name,memory.total", "--format=csv,noheader").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return nil, fmt.Errorf("cannot list GPUs with nvidia-smi: %w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("cannot list GPUs with nvidia-smi: %w", err)
	}
	return parseGPUs(string(out))
}

// parseGPUs parses nvidia-smi's "index, name, memory.total" CSV lines, such as
// "0, NVIDIA A100-SXM4-40GB, 40960 MiB". A memory of "[N/A]" becomes 0.
func parseGPUs(s string) ([]GPU, error) {
	var gpus []GPU
	for n, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) < 3 {
			return nil, fmt.Errorf("cannot parse nvidia-smi line %d %q: want 3 comma-separated fields", n+1, line)
		}
		// A name could hold a comma; index is first and memory last.
		idx, err := strconv.Atoi(strings.TrimSpace(f[0]))
		if err != nil || idx < 0 {
			return nil, fmt.Errorf("cannot parse GPU index in nvidia-smi line %d %q", n+1, line)
		}
		name := strings.TrimSpace(strings.Join(f[1:len(f)-1], ","))
		mem, err := parseMiB(strings.TrimSpace(f[len(f)-1]))
		if err != nil {
			return nil, fmt.Errorf("cannot parse GPU memory in nvidia-smi line %d %q: %w", n+1, line, err)
		}
		gpus = append(gpus, GPU{Index: idx, Name: name, MemoryMB: mem})
	}
	return gpus, nil
}

func parseMiB(s string) (int64, error) {
	if s == "[N/A]" || s == "N/A" {
		return 0, nil
	}
	num := strings.TrimSpace(strings.TrimSuffix(s, "MiB"))
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("want \"<n> MiB\", got %q", s)
	}
	return v, nil
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
