// Package nvsmi is the worker's eyes on its GPUs: it runs the two nvidia-smi
// queries of API.md ("GPUs"), parses their CSV, tells the compute processes
// of the worker's runs from foreign ones through /proc, and samples all of it
// on an interval for the heartbeat.
//
// It must never crash or flood the worker's log on a bad nvidia-smi: a
// missing binary, a hang (killed with its process group at the timeout), a
// failure or unreadable output each become a Problem, which the Sampler
// reports once when it changes. It must never report a process as foreign
// without having seen it outside every run's process group: a pid it cannot
// resolve in /proc is left out (see Sampler for the one exception).
package nvsmi
