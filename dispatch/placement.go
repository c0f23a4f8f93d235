package dispatch

// place picks a worker for a run needing gpus GPUs (0: one CPU slot) among
// caps, a pure function of its input. GPU runs go best-fit, to the worker
// with the fewest free GPUs that still fit, so large runs find whole
// machines later; CPU runs go to the worker with the most free slots.
// It returns the index into caps and the GPU indices taken, or -1.
func place(gpus int, caps []capacity) (int, []int) {
	best := -1
	for i, c := range caps {
		if gpus == 0 {
			if c.freeSlots > 0 && (best < 0 || c.freeSlots > caps[best].freeSlots) {
				best = i
			}
			continue
		}
		if len(c.freeGPUs) >= gpus && (best < 0 || len(c.freeGPUs) < len(caps[best].freeGPUs)) {
			best = i
		}
	}
	if best < 0 || gpus == 0 {
		return best, nil
	}
	return best, append([]int(nil), caps[best].freeGPUs[:gpus]...)
}

// take removes what a placement used from caps[i], so one scheduling pass
// can place several runs without re-reading the registry.
func take(caps []capacity, i int, gpus []int) {
	if len(gpus) == 0 {
		caps[i].freeSlots--
		return
	}
	caps[i].freeGPUs = caps[i].freeGPUs[len(gpus):]
}
