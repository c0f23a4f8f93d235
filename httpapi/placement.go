package httpapi

import (
	"bytes"
	"encoding/json"
	"maps"

	"github.com/rlsched/rlsched/core"
)

// applyPlacement validates where b says its run may go (API.md
// "Placement", issue 28) and writes it over sp: gpus (whole, or a fraction
// of one), gpuMemoryMb, gpuType and constraints. Values that are valid but
// that no worker has are not refused here: the run waits with pendingCode
// no_worker, which says why (dispatch/plan), since a worker that has them
// may yet connect.
func (s *Server) applyPlacement(sp *spec, b *submitBody) *apiError {
	if b.GPUs != nil {
		whole, frac, err := core.CheckGPUs(*b.GPUs, maxGPUs)
		if err != nil {
			return errBadRequest("gpus %v", err)
		}
		s.regauge(sp, whole, frac)
	}
	if b.GPUMemoryMB != nil {
		if *b.GPUMemoryMB < 0 || *b.GPUMemoryMB > core.MaxGPUMemoryMB {
			return errBadRequest("gpuMemoryMb must be MiB from 1 to %d (0: any GPU; a fractional run then gets its fraction of the GPU's memory)", core.MaxGPUMemoryMB)
		}
		sp.gpuMemoryMB = *b.GPUMemoryMB
	}
	if raw := bytes.TrimSpace(b.GPUType); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		var names []string
		if raw[0] == '"' {
			var one string
			if json.Unmarshal(raw, &one) != nil {
				return errBadRequest("gpuType must be a GPU name (such as \"A100\") or a list of them")
			}
			names = []string{one}
		} else if json.Unmarshal(raw, &names) != nil {
			return errBadRequest("gpuType must be a GPU name (such as \"A100\") or a list of them")
		}
		names, err := core.CheckGPUType(names)
		if err != nil {
			return errBadRequest("gpuType: %v", err)
		}
		sp.gpuType = nil
		if len(names) > 0 {
			sp.gpuType = names
		}
	}
	if b.Constraints != nil {
		if err := core.CheckConstraints(*b.Constraints); err != nil {
			return errBadRequest("constraints: %v", err)
		}
		sp.constraints = nil
		if len(*b.Constraints) > 0 {
			sp.constraints = maps.Clone(*b.Constraints)
		}
	}
	if sp.gpus == 0 && sp.gpuFraction == 0 && (sp.gpuMemoryMB > 0 || len(sp.gpuType) > 0) {
		return errBadRequest("gpuType and gpuMemoryMb apply to runs with GPUs: give gpus too (a fraction such as 0.5, or whole GPUs)")
	}
	return nil
}
