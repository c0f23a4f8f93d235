// Package cgroup gives each run of the worker a control group of its own,
// under a parent the worker owns, and reads the verdict from it: the run's
// memory limit (no swap past it), CPU quota, exclusive cores near its GPUs
// when it asked for whole cores, process-count limit and GPU device nodes
// (its own /dev/nvidiaN and the shared control nodes, no other GPU's), on
// cgroup v1 (memory, cpu, cpuacct, cpuset, pids, devices, freezer) or v2
// (memory.max, memory.swap.max, cpu.max, cpuset.cpus, pids.max and a BPF
// device program). At a run's end its whole group is killed, every process
// whatever its uid or session, and removed; its counters tell an
// out-of-memory kill or a hit process limit from a plain SIGKILL.
//
// What it must never do: put a run in a group it did not create, leave a
// group of an earlier worker of the same data dir alive (Open sweeps them),
// or let a run's limit exceed the worker's parent, which holds every run
// together below what the machine keeps for itself and the worker. It knows
// nothing of the worker's sessions: package worker imports it, never the
// other way.
package cgroup
