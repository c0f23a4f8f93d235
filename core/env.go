package core

import "strings"

// ReservedEnv says why a run may not set the environment variable name, or
// returns "" when it may. Names compare case-insensitively, so no spelling
// slips past a check on either side (the API at submit, the worker at
// start).
//
// The reasoning is an allow-list: a run may set any variable that only its
// own program reads once it runs. What is refused is what rlsched sets
// itself, what would choose other GPUs, and what the dynamic loader or the
// C library act on before the program's own code runs (glibc's list of
// variables it drops for set-uid programs, and every LD_* variable, now
// and future): LD_LIBRARY_PATH is the one of them a run may set, since
// CUDA installs need it and it only picks which libraries the run's own
// processes load.
func ReservedEnv(name string) string {
	switch up := strings.ToUpper(name); {
	case strings.HasPrefix(up, "RLSCHED_"), up == "CUDA_VISIBLE_DEVICES", up == "CUDA_DEVICE_ORDER":
		return "it is set by rlsched"
	case up == "NVIDIA_VISIBLE_DEVICES", up == "HIP_VISIBLE_DEVICES", up == "ROCR_VISIBLE_DEVICES",
		up == "GPU_DEVICE_ORDINAL":
		return "it would choose GPUs other than the ones rlsched gave the run"
	case strings.HasPrefix(up, "CUDA_MPS_"):
		return "it would leave the run's share of an MPS GPU (issue 28)"
	case up == "LD_LIBRARY_PATH":
		return ""
	case strings.HasPrefix(up, "LD_"):
		return "the dynamic loader acts on it (only LD_LIBRARY_PATH may be set)"
	case loaderEnv[up]:
		return "the C library acts on it before the program runs"
	}
	return ""
}

// loaderEnv are the variables besides LD_* that glibc drops for set-uid
// programs (its unsecvars.h), as the loader and libc read them at start.
var loaderEnv = map[string]bool{
	"GCONV_PATH": true, "GETCONF_DIR": true, "GLIBC_TUNABLES": true, "HOSTALIASES": true,
	"LOCALDOMAIN": true, "LOCPATH": true, "MALLOC_TRACE": true, "NIS_PATH": true, "NLSPATH": true,
	"RESOLV_HOST_CONF": true, "RES_OPTIONS": true, "TZDIR": true,
}
