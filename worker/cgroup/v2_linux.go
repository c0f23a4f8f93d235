package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// setUpV2 gives the worker a parent group with the controllers runs need.
// A non-root group that holds processes cannot hand controllers to
// children (v2's no-internal-process rule), so the worker first moves
// itself into a leaf beside its runs' parent: under systemd with
// Delegate=yes, the unit's group becomes <unit>/rlsched-<name>.self and
// <unit>/rlsched-<name>/<run>.
func (m *Manager) setUpV2() error {
	m.kind = KindV2
	own := m.h.V2
	avail, err := read(own, "cgroup.controllers")
	if err != nil {
		return fmt.Errorf("cannot read %s: %w", filepath.Join(own, "cgroup.controllers"), err)
	}
	var missing []string
	for _, c := range v2Needed {
		if !slices.Contains(strings.Fields(avail), c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the worker's cgroup %s is not given the controllers %s: run the worker in a systemd unit with Delegate=yes (docs/deploy.md), or a container with a delegated cgroup", own, strings.Join(missing, ", "))
	}
	name := "rlsched-" + m.opts.Name
	enable := "+" + strings.Join(v2Needed, " +")
	if sub, _ := read(own, "cgroup.subtree_control"); !hasAll(sub, v2Needed) {
		if !m.h.V2Root {
			self := filepath.Join(own, name+".self")
			if err := os.Mkdir(self, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("cannot create %s: %w (the worker needs root, or a delegated cgroup: systemd Delegate=yes)", self, err)
			}
			if err := write(self, "cgroup.procs", strconv.Itoa(os.Getpid())); err != nil {
				return fmt.Errorf("cannot move the worker into %s: %w", self, err)
			}
			m.self = self
		}
		if err := write(own, "cgroup.subtree_control", enable); err != nil {
			return fmt.Errorf("%w: the worker's cgroup must hold the worker alone (systemd: Delegate=yes, one worker per unit)", err)
		}
	}
	p := filepath.Join(own, name)
	if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cannot create the worker's control group %s: %w", p, err)
	}
	m.parent = map[string]string{"": p}
	if err := write(p, "cgroup.subtree_control", enable); err != nil {
		return err
	}
	if err := write(p, "cpuset.cpus", FormatList(m.opts.Cores)); err != nil {
		return err
	}
	if m.opts.MemoryMB > 0 {
		if err := write(p, "memory.max", strconv.FormatInt(m.opts.MemoryMB<<20, 10)); err != nil {
			return err
		}
		_ = write(p, "memory.swap.max", "0") // absent without swap accounting
	}
	if len(m.opts.GPUs) > 0 {
		if err := m.probeDevices(p); err != nil {
			return err
		}
	}
	m.sweep(p, func(d string) (int, error) { return killV2Dir(d, removeTimeout) })
	return nil
}

// probeDevices checks once that a device program can be loaded and
// attached, on a group made for it, so that a worker that cannot wall off
// GPUs says so at its start rather than at each run's.
func (m *Manager) probeDevices(parent string) error {
	d := filepath.Join(parent, "probe")
	if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cannot create %s: %w", d, err)
	}
	defer os.Remove(d)
	if err := m.attachDevices(d, []int{0}); err != nil {
		return fmt.Errorf("cannot attach a BPF device program to limit GPUs (%w): the worker needs CAP_SYS_ADMIN and CAP_BPF (root, or a container with them)", err)
	}
	return nil
}

func hasAll(list string, want []string) bool {
	f := strings.Fields(list)
	for _, w := range want {
		if !slices.Contains(f, w) {
			return false
		}
	}
	return true
}

func (g *Group) createV2(shared []int) error {
	d := filepath.Join(g.m.parent[""], g.name)
	g.dirs[""] = d
	if err := os.Mkdir(d, 0o755); err != nil {
		return err
	}
	l := g.limits
	if l.MemoryMB > 0 {
		if err := write(d, "memory.max", strconv.FormatInt(l.MemoryMB<<20, 10)); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(d, "memory.swap.max")); err == nil {
			if err := write(d, "memory.swap.max", "0"); err != nil {
				return err
			}
		}
	}
	// One verdict for the run: the OOM killer takes the whole group, not
	// one process the run might survive half-dead.
	if err := write(d, "memory.oom.group", "1"); err != nil {
		return err
	}
	if l.CPUMillis > 0 {
		if err := write(d, "cpu.max", fmt.Sprintf("%d 100000", max(l.CPUMillis*100, 1000))); err != nil {
			return err
		}
	}
	cpus := g.exclusive
	if cpus == nil {
		cpus = shared
	}
	if err := write(d, "cpuset.cpus", FormatList(cpus)); err != nil {
		return err
	}
	if g.m.opts.PidsMax > 0 {
		if err := write(d, "pids.max", strconv.FormatInt(g.m.opts.PidsMax, 10)); err != nil {
			return err
		}
	}
	if len(g.m.opts.GPUs) > 0 {
		if err := g.m.attachDevices(d, g.m.denyMinors(l.GPUs)); err != nil {
			return fmt.Errorf("cannot limit the run's devices: %w", err)
		}
	}
	return nil
}

// startV2 has the kernel fork cmd straight into the group
// (CLONE_INTO_CGROUP, Linux 5.7).
func (g *Group) startV2(cmd *exec.Cmd) error {
	fd, err := unix.Open(g.dirs[""], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cannot open the run's control group: %w", err)
	}
	defer unix.Close(fd)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	return cmd.Start()
}

func (g *Group) killV2(timeout time.Duration) (int, error) {
	return killV2Dir(g.dirs[""], timeout)
}

// killV2Dir kills a v2 group: cgroup.kill (Linux 5.14) in one step, else
// freeze, SIGKILL each process, thaw.
func killV2Dir(dir string, timeout time.Duration) (int, error) {
	pids, err := procs(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	if len(pids) == 0 {
		return 0, nil
	}
	deadline := time.Now().Add(timeout)
	if err := write(dir, "cgroup.kill", "1"); err != nil {
		self := os.Getpid()
		for len(pids) > 0 && time.Now().Before(deadline) {
			_ = write(dir, "cgroup.freeze", "1")
			pids, _ = procs(dir)
			for _, p := range pids {
				if p != self {
					_ = unix.Kill(p, unix.SIGKILL)
				}
			}
			_ = write(dir, "cgroup.freeze", "0")
			waitEmpty(dir, min(time.Until(deadline), 200*time.Millisecond))
			pids, _ = procs(dir)
		}
	}
	waitEmpty(dir, time.Until(deadline))
	if left, _ := procs(dir); len(left) > 0 {
		return len(pids), fmt.Errorf("%d processes of %s outlived SIGKILL", len(left), dir)
	}
	return len(pids), nil
}

func (g *Group) usageV2(u *Usage) {
	d := g.dirs[""]
	if us := readKey(d, "cpu.stat", "usage_usec"); us >= 0 {
		u.CPUSeconds = float64(us) / 1e6
	}
	u.PeakMemoryMB = mb(readInt(d, "memory.peak")) // Linux 5.19
	if n := readKey(d, "memory.events", "oom_kill"); n > 0 {
		u.OOMKills = n
	}
	if n := readKey(d, "memory.events", "oom_group_kill"); n > 0 && u.OOMKills == 0 {
		u.OOMKills = n
	}
	if n := readKey(d, "pids.events", "max"); n > 0 {
		u.PidsRefused = n
	}
}
