package cgroup

import "strconv"

// CPU weights. A run's quota caps it, but under contention the kernel
// shares the cores by weight, level by level: the worker's parent group
// competes with every process outside rlsched as one of them (v1
// cpu.shares 1024, v2 cpu.weight 100), so that two 1-core runs beside one
// spinning process would get half a core each. The parent therefore
// weighs coreWeight processes for each core its runs with a quota hold, and
// one process for each run without one (up to the kernel's maximum); each
// run weighs the same way inside it. A run that weighs more than a process
// has a quota, so the weight never takes more than the cores asked for: the
// reserved cores and what runs leave idle stay the rest of the machine's,
// and a machine loaded from outside by more than coreWeight processes a
// core still gives them a share rather than nothing.

// coreWeight is a held core's weight in processes: against one spinning
// process, two 1-core runs on 2 cores get 16/17 of the machine (0.97 core
// each).
const coreWeight = 16

// weightScale is one hierarchy's cpu weight: the file, a process's
// default and the kernel's maximum.
type weightScale struct {
	file          string
	def, maxValue int64
}

var (
	weightV1 = weightScale{"cpu.shares", 1024, 262144}
	weightV2 = weightScale{"cpu.weight", 100, 10000}
)

// runWeight is the weight of a run with cpuMillis (0: no quota).
func (w weightScale) runWeight(cpuMillis int64) int64 {
	return min(max(w.def*coreWeight*cpuMillis/1000, w.def), w.maxValue)
}

// parentWeight is the parent's weight for runs of these weights.
func (w weightScale) parentWeight(runs []int64) int64 {
	sum := int64(0)
	for _, r := range runs {
		sum += r
	}
	return min(max(sum, w.def), w.maxValue)
}

func (m *Manager) weights() weightScale {
	if m.kind == KindV1 {
		return weightV1
	}
	return weightV2
}

// cpuDir is where a group's cpu weight is written: its cpu controller's
// dir (v1) or its one dir (v2).
func cpuDir(dirs map[string]string) string {
	if d, ok := dirs["cpu"]; ok {
		return d
	}
	return dirs[""]
}

// reweigh writes the parent's weight for the groups of now; under m.mu,
// so that the last write is of the last groups.
func (m *Manager) reweigh() {
	w := m.weights()
	m.mu.Lock()
	defer m.mu.Unlock()
	runs := make([]int64, 0, len(m.groups))
	for _, g := range m.groups {
		runs = append(runs, w.runWeight(g.limits.CPUMillis))
	}
	if err := write(cpuDir(m.parent), w.file, strconv.FormatInt(w.parentWeight(runs), 10)); err != nil {
		m.log.Warn().Err(err).Msg("cannot set the CPU weight of the runs' parent group")
	}
}

// setWeight writes the group's own weight among its siblings.
func (g *Group) setWeight() error {
	w := g.m.weights()
	return write(cpuDir(g.dirs), w.file, strconv.FormatInt(w.runWeight(g.limits.CPUMillis), 10))
}
