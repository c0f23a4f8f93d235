// Package gpuwatch holds the master's rules over workers' GPU samples
// (API.md, "GPUs"): the per-run series sys/gpu_utilization and
// sys/gpu_memory_mb (and sys/cpu_cores, sys/memory_mb from the runs' use
// of their worker's cores and memory, issue 26), the idle rule (warn, or cancel, a run whose GPUs stay
// idle), and the foreign-process rules (which GPUs the planner must not give
// out, which running runs got a process beside them).
//
// It is pure: no I/O, no clock, no goroutines. Times come in as arguments, so
// the rules are tested by feeding samples at chosen times. A Watch keeps the
// state of one worker's runs and belongs to whoever owns that worker's
// session; it is not safe for concurrent use.
package gpuwatch
