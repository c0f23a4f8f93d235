package core

import "strings"

// ReservedEnv says why a run may not set the environment variable name, or
// returns "" when it may. Names compare case-insensitively, so no spelling
// slips past a check on either side (the API at submit, the worker at
// start).
func ReservedEnv(name string) string {
	switch up := strings.ToUpper(name); {
	case strings.HasPrefix(up, "RLSCHED_"), up == "CUDA_VISIBLE_DEVICES", up == "CUDA_DEVICE_ORDER":
		return "it is set by rlsched"
	case up == "NVIDIA_VISIBLE_DEVICES", up == "HIP_VISIBLE_DEVICES", up == "ROCR_VISIBLE_DEVICES",
		up == "GPU_DEVICE_ORDINAL":
		return "it would choose GPUs other than the ones rlsched gave the run"
	case up == "LD_PRELOAD":
		return "it loads code into every process of the run"
	}
	return ""
}
