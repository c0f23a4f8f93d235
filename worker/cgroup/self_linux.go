package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// The worker keeps itself (and in `up` the master beside it) off the cores
// its runs hold alone. The kernel's cpusets fence a run onto its cores but
// do not fence the rest of the machine off them: with every core busy (a
// run spinning on the shared ones), the scheduler wakes the worker's
// threads, for a sample or a log batch, onto the exclusive core and
// preempts the run there. (The bench's memory-hungry neighbour does not
// show it beyond the machine's noise, bench/changes.md: the worker is
// nearly idle there.) So the worker's threads live in a group of their own, "rlsched-<name>.self"
// beside the runs' parent, whose cpus are the worker's own less the
// exclusive ones; the spawner thread returns there after each fork (v1).

// selfCoresLocked are the cores the worker may run on now: its own less
// those a run holds alone, never none. Call with m.mu held.
func (m *Manager) selfCoresLocked() []int {
	own := m.opts.Self
	if len(own) == 0 {
		own = m.cores.all
	}
	out := slices.DeleteFunc(slices.Clone(own), func(c int) bool {
		_, held := m.cores.owner[c]
		return held
	})
	if len(out) == 0 {
		return own
	}
	return out
}

// confineV1 moves the worker into its own cpuset group. Failing to is not
// fatal: the runs' limits hold without it, only their exclusive cores are
// less so.
func (m *Manager) confineV1(name string) {
	home := m.h.V1["cpuset"]
	d := filepath.Join(home, name+".self")
	// Those of workers that died (a worker's own is reused by the next of
	// its data dir, but a machine sees many data dirs over time); the
	// kernel refuses to remove one a live worker is in.
	old, _ := filepath.Glob(filepath.Join(home, "rlsched-*.self"))
	for _, o := range old {
		if o != d {
			_ = os.Remove(o)
		}
	}
	var err error
	// Another worker's clean-up above may remove this one's group between
	// its mkdir and its move: then again.
	for range 3 {
		if err = m.joinV1(home, d); !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	if err != nil {
		m.log.Warn().Err(err).Msg("cannot keep the worker off the cores its runs hold alone; the runs may be preempted there by the worker")
		_ = os.Remove(d)
		return
	}
	m.self, m.home = d, home
}

// joinV1 makes the cpuset group d beside home and moves the worker in.
func (m *Manager) joinV1(home, d string) error {
	if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	mems, err := read(home, "cpuset.mems")
	if err != nil {
		return err
	}
	m.mu.Lock()
	cpus := FormatList(m.selfCoresLocked())
	m.mu.Unlock()
	if err := write(d, "cpuset.cpus", cpus); err != nil {
		return err
	}
	if err := write(d, "cpuset.mems", mems); err != nil {
		return err
	}
	return write(d, "cgroup.procs", strconv.Itoa(os.Getpid()))
}

// setSelfCores writes the worker's own cores after a run took or gave
// back exclusive ones.
func (m *Manager) setSelfCores(cpus string) {
	if m.self == "" {
		return
	}
	if err := write(m.self, "cpuset.cpus", cpus); err != nil && !errors.Is(err, os.ErrNotExist) {
		m.log.Warn().Err(err).Msg("cannot update the worker's own cores")
	}
}

// unconfine moves the worker back where it was (v1; on v2 its old group
// holds the runs' parent now) and removes its own group.
func (m *Manager) unconfine() {
	if m.self == "" || m.home == "" {
		return
	}
	if err := write(m.home, "cgroup.procs", strconv.Itoa(os.Getpid())); err == nil {
		_ = os.Remove(m.self)
	}
}

// moveHome moves thread tid back into the worker's own group of v1
// controller c: its cpuset group, or where it was when that is gone (a
// second worker of the same process, in tests, took the process into its
// own and the first's was cleaned up).
func (m *Manager) moveHome(c, tid string) error {
	if m.self != "" && m.h.V1[c] == m.home {
		if err := write(m.self, "tasks", tid); err == nil {
			return nil
		}
	}
	return write(m.h.V1[c], "tasks", tid)
}
