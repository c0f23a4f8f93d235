package worker

import "fmt"

// GPU_SHARING values: how fractional runs share a GPU.
const (
	// SharingTimeslice leaves them to CUDA's time-slicing; the GPU memory
	// watchdog (gpuwatch.go) stops a run over its memory share.
	SharingTimeslice = "timeslice"
	// SharingMPS runs an MPS control daemon per shared GPU, which limits
	// each run's memory and threads itself; the watchdog only reports.
	SharingMPS = "mps"
)

// resolveSharing picks GPU_SHARING's default and refuses what cannot work.
// An MPS server serves the clients of one uid at a time (a client of
// another uid waits in its CUDA start until the server's clients are all
// gone), and RUN_AS=dynamic gives every run a uid of its own: two runs
// could never share a GPU that way (docs/decisions.md "Issue 28: GPU
// sharing").
func resolveSharing(mode, runAs string) (string, error) {
	switch mode {
	case "", SharingTimeslice:
		return SharingTimeslice, nil
	case SharingMPS:
		if runAs == RunAsDynamic {
			return "", fmt.Errorf("cannot start worker: GPU_SHARING=mps with RUN_AS=dynamic: an MPS server serves one uid at a time and every run has a uid of its own, so no two runs could share a GPU; use RUN_AS=user (the runs of one user share its GPU) or none, or GPU_SHARING=timeslice")
		}
		return SharingMPS, nil
	}
	return "", fmt.Errorf("cannot start worker: GPU_SHARING=%q: want timeslice or mps", mode)
}
