package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

var unixEBUSY = unix.EBUSY

// nvidiaMajor is the character major of /dev/nvidia<N> and the control
// nodes nvidiactl (255) and nvidia-modeset (254); nvidia-uvm and
// nvidia-uvm-tools have a dynamic major, which the wall leaves open.
const nvidiaMajor = 195

// setUpV1 makes the parent in each controller: its cores and memory nodes
// (a new cpuset has none), its memory cap, and sweeps what an earlier
// worker left.
func (m *Manager) setUpV1() error {
	m.kind = KindV1
	m.parent = map[string]string{}
	name := "rlsched-" + m.opts.Name
	for _, c := range append(slices.Clone(v1Needed), v1Optional...) {
		own, ok := m.h.V1[c]
		if !ok {
			if slices.Contains(v1Needed, c) {
				return fmt.Errorf("the cgroup v1 controller %q is not mounted: mount it (mount -t cgroup -o %s cgroup /sys/fs/cgroup/%s), or boot with cgroup v2", c, c, c)
			}
			continue
		}
		p := filepath.Join(own, name)
		if slices.Contains(mapValues(m.parent), p) { // co-mounted (cpu,cpuacct): one dir
			m.parent[c] = p
			continue
		}
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cannot create the worker's control group %s: %w (the worker needs root and a writable cgroup tree; in a container, give it one with delegation)", p, err)
		}
		m.parent[c] = p
	}
	cp := m.parent["cpuset"]
	mems, err := read(m.h.V1["cpuset"], "cpuset.mems")
	if err != nil {
		return fmt.Errorf("cannot read the worker's memory nodes: %w", err)
	}
	if err := write(cp, "cpuset.cpus", FormatList(m.opts.Cores)); err != nil {
		return err
	}
	if err := write(cp, "cpuset.mems", mems); err != nil {
		return err
	}
	if m.opts.MemoryMB > 0 {
		if err := setMemoryV1(m.parent["memory"], m.opts.MemoryMB); err != nil {
			return err
		}
	}
	m.confineV1(name)
	done := map[string]bool{}
	for c, p := range m.parent {
		if !done[p] {
			done[p] = true
			m.sweep(p, func(d string) (int, error) {
				return killV1Dir(d, m.parent["freezer"] != "" && c == "freezer", removeTimeout)
			})
		}
	}
	return nil
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// setMemoryV1 limits memory and, where swap is accounted, memory plus swap
// to the same bytes: no swap past the limit.
func setMemoryV1(dir string, mbs int64) error {
	b := strconv.FormatInt(mbs<<20, 10)
	if err := write(dir, "memory.limit_in_bytes", b); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
		return write(dir, "memory.memsw.limit_in_bytes", b)
	}
	return nil
}

func (g *Group) createV1(shared []int) error {
	m := g.m
	made := map[string]bool{}
	for c, p := range m.parent {
		d := filepath.Join(p, g.name)
		g.dirs[c] = d
		if made[d] {
			continue
		}
		made[d] = true
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	l := g.limits
	cs := g.dirs["cpuset"]
	cpus := g.exclusive
	if cpus == nil {
		cpus = shared
	}
	if err := write(cs, "cpuset.cpus", FormatList(cpus)); err != nil {
		return err
	}
	mems, _ := read(m.parent["cpuset"], "cpuset.mems")
	if err := write(cs, "cpuset.mems", mems); err != nil {
		return err
	}
	if l.MemoryMB > 0 {
		if err := setMemoryV1(g.dirs["memory"], l.MemoryMB); err != nil {
			return err
		}
	}
	if l.CPUMillis > 0 {
		if err := write(g.dirs["cpu"], "cpu.cfs_period_us", "100000"); err != nil {
			return err
		}
		if err := write(g.dirs["cpu"], "cpu.cfs_quota_us", strconv.FormatInt(max(l.CPUMillis*100, 1000), 10)); err != nil {
			return err
		}
	}
	if m.opts.PidsMax > 0 {
		if err := write(g.dirs["pids"], "pids.max", strconv.FormatInt(m.opts.PidsMax, 10)); err != nil {
			return err
		}
	}
	return g.denyDevicesV1()
}

// denyDevicesV1 adds a deny exception for every other GPU's node to the
// group's allow-all devices list: the run opens its own GPUs, the control
// nodes and every non-GPU device, and gets EPERM from the kernel, before
// any driver, for another GPU.
func (g *Group) denyDevicesV1() error {
	deny := g.m.denyMinors(g.limits.GPUs)
	if len(deny) == 0 {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(g.dirs["devices"], "devices.deny"), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cannot limit the run's devices: %w", err)
	}
	defer f.Close()
	for _, minor := range deny {
		// One rule per write: the kernel parses each write alone.
		if _, err := fmt.Fprintf(f, "c %d:%d rwm", nvidiaMajor, minor); err != nil {
			return fmt.Errorf("cannot deny the run GPU node %d:%d: %w", nvidiaMajor, minor, err)
		}
	}
	return nil
}

// denyMinors are the device minors of the machine's GPUs that are not the
// run's.
func (m *Manager) denyMinors(own []int) []int {
	var out []int
	for _, gp := range m.opts.GPUs {
		if !slices.Contains(own, gp.Index) {
			out = append(out, gp.Minor)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (g *Group) setCpus(list string) error {
	if g.m.kind == KindV1 {
		return write(g.dirs["cpuset"], "cpuset.cpus", list)
	}
	return write(g.dirs[""], "cpuset.cpus", list)
}

// startV1 forks cmd from a thread moved into the group's every
// controller: v1 places threads one by one, and a child is born where the
// thread that forked it is. The thread moves back into the worker's own
// groups after (moveHome).
func (g *Group) startV1(cmd *exec.Cmd) (err error) {
	tid := strconv.Itoa(unix.Gettid())
	var moved []string
	defer func() {
		for _, c := range moved {
			if e := g.m.moveHome(c, tid); e != nil {
				g.m.log.Error().Err(e).Str("controller", c).Msg("cannot move the spawner thread back out of a run's control group")
				if err == nil {
					err = e
				}
			}
		}
	}()
	seen := map[string]bool{}
	for c, d := range g.dirs {
		if seen[d] {
			continue
		}
		seen[d] = true
		if err := write(d, "tasks", tid); err != nil {
			return fmt.Errorf("cannot start the run inside its control group: %w", err)
		}
		moved = append(moved, c)
	}
	return cmd.Start()
}

// procsDir is the v1 dir whose cgroup.procs lists the group's processes.
func (g *Group) procsDir() string {
	if d, ok := g.dirs["freezer"]; ok {
		return d
	}
	return g.dirs["pids"]
}

func (g *Group) killV1(timeout time.Duration) (int, error) {
	d := g.procsDir()
	_, frz := g.dirs["freezer"]
	n, err := killV1Dir(d, frz, timeout)
	// A process is in every controller; those read elsewhere are
	// only a check.
	for _, dd := range g.dirs {
		if dd == d {
			continue
		}
		if left, _ := procs(dd); len(left) > 0 {
			n2, _ := killV1Dir(dd, false, timeout)
			n += n2
		}
	}
	return n, err
}

// killV1Dir kills every process of a v1 group dir. With the freezer (dir
// is the freezer's), the group is frozen first so that no process forks
// between the listing and the kill, signalled, then thawed to die.
func killV1Dir(dir string, freezer bool, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	killed := 0
	self := os.Getpid()
	for {
		pids, err := procs(dir)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return killed, nil
			}
			return killed, err
		}
		pids = slices.DeleteFunc(pids, func(p int) bool { return p == self })
		if len(pids) == 0 {
			return killed, nil
		}
		if time.Now().After(deadline) {
			return killed, fmt.Errorf("%d processes of %s outlived SIGKILL", len(pids), dir)
		}
		if freezer {
			freeze(dir, deadline)
			pids, _ = procs(dir)
			pids = slices.DeleteFunc(pids, func(p int) bool { return p == self })
		}
		for _, p := range pids {
			if unix.Kill(p, unix.SIGKILL) == nil {
				killed++
			}
		}
		if freezer {
			_ = write(dir, "freezer.state", "THAWED")
		}
		waitEmpty(dir, min(time.Until(deadline), 200*time.Millisecond))
	}
}

// freeze asks the v1 freezer to freeze dir and waits until it has.
func freeze(dir string, deadline time.Time) {
	if write(dir, "freezer.state", "FROZEN") != nil {
		return
	}
	for time.Now().Before(deadline) {
		if s, _ := read(dir, "freezer.state"); s == "FROZEN" {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// waitEmpty waits until dir's cgroup.procs is empty or d passes.
func waitEmpty(dir string, d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if p, err := procs(dir); err != nil || len(p) == 0 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// oomKillsV1 counts the OOM kills of a v1 memory group and the groups
// inside it (a container's while it is there, ContainerParent): v1 counts
// a kill in the victim's own group only. -1: the kernel counts none.
func oomKillsV1(dir string) int64 {
	n := readKey(dir, "memory.oom_control", "oom_kill")
	if n < 0 {
		return n
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			n += max(oomKillsV1(filepath.Join(dir, e.Name())), 0)
		}
	}
	return n
}

func (g *Group) usageV1(u *Usage) {
	if d, ok := g.dirs["cpuacct"]; ok {
		if ns := readInt(d, "cpuacct.usage"); ns >= 0 {
			u.CPUSeconds = float64(ns) / 1e9
		}
	}
	md := g.dirs["memory"]
	u.PeakMemoryMB = mb(readInt(md, "memory.max_usage_in_bytes"))
	if n := oomKillsV1(md); n >= 0 {
		u.OOMKills = n
	} else if fc := readInt(md, "memory.failcnt"); fc > 0 && g.limits.MemoryMB > 0 && u.PeakMemoryMB >= g.limits.MemoryMB {
		// A kernel before 4.13 counts no OOM kills: a group that hit its
		// limit and peaked at it was the OOM killer's.
		u.OOMKills = 1
	}
	if n := readKey(g.dirs["pids"], "pids.events", "max"); n > 0 {
		u.PidsRefused = n
	}
}
