package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// removeTimeout bounds how long Remove waits for the kernel to let go of
// an emptied group (a dying process still charged to it).
const removeTimeout = 2 * time.Second

// Manager creates, kills and removes the groups of one worker's runs. Its
// methods are safe for concurrent use; a nil *Manager enforces nothing.
type Manager struct {
	kind, warning string
	opts          Options
	h             *Hierarchy
	log           zerolog.Logger
	// parent: per controller (v1) or the one v2 directory (key ""), the
	// worker's parent group of its runs.
	parent map[string]string
	// attachDevices puts the v2 device program on a group's directory; a
	// test of a fake tree replaces it.
	attachDevices func(dir string, deny []int) error

	// self is the worker's own group (self_linux.go): v1 in the cpuset
	// controller, home where it came from; v2 the leaf it moved into.
	self, home string

	mu     sync.Mutex
	cores  cores
	groups map[string]*Group // by name: their cpusets follow the exclusive cores
}

// Open prepares the worker's parent group and sweeps the groups an earlier
// worker of the same data dir left (killing what runs in them). It returns
// an error only in Required mode, saying what is missing and how to fix
// it; in BestEffort mode it returns a Manager of KindNone with a warning.
func Open(o Options) (*Manager, error) {
	return openWith(o, attachDeviceProgram)
}

// openWith is Open with the v2 device program's attach given.
func openWith(o Options, attach func(dir string, deny []int) error) (*Manager, error) {
	m := &Manager{kind: KindNone, opts: o, log: o.Log, groups: map[string]*Group{},
		cores: cores{all: slices.Clone(o.Cores), owner: map[int]string{}}, attachDevices: attach}
	if o.Mode == Off {
		m.warning = "RESOURCE_ENFORCEMENT=off: the cores, memory and GPUs of runs are not enforced"
		return m, nil
	}
	err := m.setUp()
	if err == nil {
		m.log.Info().Str("enforcement", m.kind).Str("parent", m.parentDir()).Int("cores", len(o.Cores)).
			Int64("memory_mb", o.MemoryMB).Msg("each run gets a control group of its own")
		return m, nil
	}
	if o.Mode == Required {
		return nil, fmt.Errorf("cannot start worker: RESOURCE_ENFORCEMENT=required, but runs cannot get control groups of their own: %w; "+
			"or set RESOURCE_ENFORCEMENT=best-effort to run them without limits", err)
	}
	m.kind, m.parent = KindNone, nil
	m.warning = "runs are not limited to their cores, memory and GPUs: " + err.Error()
	m.log.Warn().Str("enforcement", KindNone).Msg(m.warning)
	return m, nil
}

// Close removes the worker's parent groups once its runs' are gone; one
// still holding a group (a run that outlived SIGKILL) stays.
func (m *Manager) Close() {
	if m == nil {
		return
	}
	m.unconfine()
	for _, p := range m.parent {
		_ = os.Remove(p)
	}
}

// Kind is Hello.enforcement; Warning is Hello.enforcement_warning.
func (m *Manager) Kind() string {
	if m == nil {
		return KindNone
	}
	return m.kind
}

func (m *Manager) Warning() string {
	if m == nil {
		return ""
	}
	return m.warning
}

func (m *Manager) parentDir() string {
	if p, ok := m.parent[""]; ok {
		return p
	}
	return m.parent["memory"]
}

func (m *Manager) setUp() error {
	if os.Geteuid() != 0 && m.opts.Hierarchy == nil {
		return fmt.Errorf("the worker runs as uid %d, not root: run it as root (a systemd unit with Delegate=yes, docs/deploy.md)", os.Geteuid())
	}
	h := m.opts.Hierarchy
	if h == nil {
		var err error
		if h, err = Detect(); err != nil {
			return err
		}
	}
	m.h = h
	switch h.Version {
	case 1:
		return m.setUpV1()
	case 2:
		return m.setUpV2()
	}
	return errors.New("no cgroup hierarchy with a memory controller is mounted (/sys/fs/cgroup): mount cgroup2, or the v1 controllers memory, cpu, cpuset, pids and devices")
}

// Group is one run's control group. Its methods are called by one
// goroutine at a time (the run's); a nil *Group does nothing.
type Group struct {
	m    *Manager
	name string
	// dirs: per controller (v1) or "" (v2).
	dirs      map[string]string
	limits    Limits
	exclusive []int // cores the group holds alone
	killed    bool
}

// groupName is the directory name of a run's group.
func groupName(task string, attempt int32, fence uint64) string {
	return fmt.Sprintf("%s.%d.%d", task, attempt, fence)
}

// Create makes the group of a run with limits l: nil, nil when the Manager
// enforces nothing. On an error nothing of it is left.
func (m *Manager) Create(task string, attempt int32, fence uint64, l Limits) (*Group, error) {
	if m == nil || m.kind == KindNone {
		return nil, nil
	}
	g := &Group{m: m, name: groupName(task, attempt, fence), dirs: map[string]string{}, limits: l}
	m.mu.Lock()
	if l.CPUMillis > 0 && l.CPUMillis%1000 == 0 {
		g.exclusive = m.cores.take(g.name, int(l.CPUMillis/1000), l.Near)
		if g.exclusive == nil {
			m.log.Warn().Str("group", g.name).Int64("cpu_millis", l.CPUMillis).
				Msg("not enough free cores to give the run its cores exclusively; it gets its CPU quota on the shared cores")
		}
	}
	m.groups[g.name] = g
	shared := m.cores.shared()
	m.mu.Unlock()
	var err error
	if m.kind == KindV1 {
		err = g.createV1(shared)
	} else {
		err = g.createV2(shared)
	}
	if err == nil {
		err = g.setWeight()
	}
	if err != nil {
		g.Remove()
		return nil, fmt.Errorf("cannot create the run's control group: %w", err)
	}
	m.reweigh()
	if g.exclusive != nil {
		m.reshare()
	}
	return g, nil
}

// reshare gives every group without exclusive cores the shared ones of
// now, after a group took or gave back exclusive cores.
func (m *Manager) reshare() {
	m.mu.Lock()
	shared := FormatList(m.cores.shared())
	self := FormatList(m.selfCoresLocked())
	var gs []*Group
	for _, g := range m.groups {
		if g.exclusive == nil {
			gs = append(gs, g)
		}
	}
	m.mu.Unlock()
	for _, g := range gs {
		if err := g.setCpus(shared); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn().Err(err).Str("group", g.name).Msg("cannot update the shared cores of a run")
		}
	}
	m.setSelfCores(self)
}

// Dir is the group's directory (v2), or its memory controller's (v1).
func (g *Group) Dir() string {
	if g == nil {
		return ""
	}
	if d, ok := g.dirs[""]; ok {
		return d
	}
	return g.dirs["memory"]
}

// Cores are the cores the group holds exclusively, as a cpu list; "" when
// it shares them.
func (g *Group) Cores() string {
	if g == nil {
		return ""
	}
	return FormatList(g.exclusive)
}

// Start starts cmd inside the group, so that it and everything it forks
// are born in it. On v1 it moves the calling OS thread into the group for
// the fork and back out after it: call it from a goroutine locked to its
// thread (the worker's spawner) with nothing else forking there.
func (g *Group) Start(cmd *exec.Cmd) error {
	if g == nil {
		return cmd.Start()
	}
	if g.m.kind == KindV1 {
		return g.startV1(cmd)
	}
	return g.startV2(cmd)
}

// Kill SIGKILLs every process of the group, whatever its uid or session,
// until none is left or timeout passes; it reports how many it signalled.
func (g *Group) Kill(timeout time.Duration) (int, error) {
	if g == nil {
		return 0, nil
	}
	g.killed = true
	if g.m.kind == KindV1 {
		return g.killV1(timeout)
	}
	return g.killV2(timeout)
}

// Usage reads the group's counters. Call it after Kill: the peak and the
// CPU seconds are final then.
func (g *Group) Usage() Usage {
	if g == nil {
		return Usage{PeakMemoryMB: -1}
	}
	u := Usage{MemoryLimitMB: g.limits.MemoryMB, PidsMax: g.m.opts.PidsMax}
	if g.m.kind == KindV1 {
		g.usageV1(&u)
	} else {
		g.usageV2(&u)
	}
	return u
}

// Now reads the group's CPU time so far and the memory it holds. Unlike
// the other methods it may be called from any goroutine while the run runs
// (the worker's sampler): it only reads files.
func (g *Group) Now() Now {
	if g == nil {
		return Now{CPUNanos: -1, MemoryBytes: -1}
	}
	if g.m.kind == KindV1 {
		n := Now{CPUNanos: -1, MemoryBytes: readInt(g.dirs["memory"], "memory.usage_in_bytes")}
		if d, ok := g.dirs["cpuacct"]; ok {
			n.CPUNanos = readInt(d, "cpuacct.usage")
		}
		return n
	}
	d := g.dirs[""]
	n := Now{CPUNanos: readKey(d, "cpu.stat", "usage_usec"), MemoryBytes: readInt(d, "memory.current")}
	if n.CPUNanos > 0 {
		n.CPUNanos *= 1000
	}
	return n
}

// Remove kills what is left (when Kill was not called) and removes the
// group; its exclusive cores return to the shared ones.
func (g *Group) Remove() {
	if g == nil {
		return
	}
	if !g.killed {
		_, _ = g.Kill(removeTimeout)
	}
	// The map holds one dir per controller; children first: the groups
	// a container runtime made inside it (ContainerParent).
	for c, d := range g.dirs {
		if err := removeTree(d); err != nil {
			g.m.log.Warn().Err(err).Str("controller", c).Str("dir", d).Msg("cannot remove the run's control group")
		}
	}
	m := g.m
	m.mu.Lock()
	delete(m.groups, g.name)
	had := g.exclusive != nil
	m.cores.give(g.name)
	m.mu.Unlock()
	m.reweigh()
	if had {
		m.reshare()
	}
}

// ContainerParent is where a container runtime puts a run's container
// (issue 27, worker/image.go), for its --cgroup-parent: the group's path
// as /proc/self/cgroup names it (on v1 the memory controller's), so that
// the group's memory limit holds the container; the runtime makes its
// groups inside, which Kill, Usage and Remove take too. The runtime's own
// process stays out of the group (its memory is not the run's). ok is
// false for a nil group (nothing enforced).
func (g *Group) ContainerParent() (path string, ok bool) {
	if g == nil {
		return "", false
	}
	d, base, own := g.dirs["memory"], g.m.h.V1["memory"], g.m.h.V1Path["memory"]
	if g.m.kind != KindV1 {
		d, base, own = g.dirs[""], g.m.h.V2, g.m.h.V2Path
	}
	rel, err := filepath.Rel(base, d)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", false
	}
	return filepath.Join("/", own, rel), true
}

// removeTree removes a group's directory and the groups inside it, the
// deepest first.
func removeTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return rmdirWait(dir, removeTimeout)
}

// rmdirWait removes a group's directory, retrying while the kernel still
// counts a dying process in it.
func rmdirWait(dir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, unixEBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sweep kills and removes every group under parent dir: the runs of an
// earlier worker of this data dir, which died without ending them.
func (m *Manager) sweep(dir string, kill func(dir string) (int, error)) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		d := filepath.Join(dir, e.Name())
		n, err := kill(d)
		if err != nil {
			m.log.Warn().Err(err).Str("dir", d).Msg("cannot kill the processes of an earlier run's control group")
		}
		if err := rmdirWait(d, removeTimeout); err != nil {
			m.log.Warn().Err(err).Str("dir", d).Msg("cannot remove an earlier run's control group")
			continue
		}
		m.log.Info().Str("dir", d).Int("killed", n).Msg("removed the control group of a run an earlier worker left")
	}
}

// write writes one value to a control file.
func write(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("cannot write %q to %s: %w", value, filepath.Join(dir, file), err)
	}
	return nil
}

// read reads a control file, trimmed.
func read(dir, file string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	return strings.TrimSpace(string(b)), err
}

// readInt reads a control file holding one number; -1 when it cannot.
func readInt(dir, file string) int64 {
	s, err := read(dir, file)
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// readKey reads the number after key in a flat keyed file (memory.events,
// pids.events, cpu.stat, memory.oom_control); -1 when absent.
func readKey(dir, file, key string) int64 {
	s, err := read(dir, file)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// procs lists the pids in a group's cgroup.procs and in those of the
// groups inside it (a container's, ContainerParent).
func procs(dir string) ([]int, error) {
	s, err := read(dir, "cgroup.procs")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(s) {
		if p, err := strconv.Atoi(f); err == nil && p > 0 {
			out = append(out, p)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			sub, _ := procs(filepath.Join(dir, e.Name()))
			out = append(out, sub...)
		}
	}
	return out, nil
}

// mb converts bytes to MiB, rounding up.
func mb(b int64) int64 {
	if b < 0 {
		return -1
	}
	return (b + 1<<20 - 1) >> 20
}
