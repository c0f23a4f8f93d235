package cli

import (
	"fmt"
	"strings"

	"github.com/rlsched/rlsched/core"
)

func init() {
	register(&command{
		name:    "gpus",
		args:    "[--json]",
		summary: "One line per GPU of every worker, like gpustat: utilisation, memory, the run holding it, foreign processes.",
		details: "Values are from each worker's last nvidia-smi sample (GPU_SAMPLE_SECONDS). FOREIGN lists\n" +
			"the processes on a GPU that no run started (pid, and for admins user and command): rlsched\n" +
			"gives that GPU to no new run while they are there. A run whose GPUs all stay under\n" +
			"IDLE_GPU_UTIL is marked idle.",
		examples: []string{"rlsched gpus", "rlsched gpus --json"},
		run:      runGPUs,
	})
}

func runGPUs(inv *invocation, args []string) int {
	fs := inv.newFlags()
	jsonOut := fs.Bool("json", false, "print the server's JSON (GET /api/workers)")
	if _, code, ok := inv.start(args, 0, 0); !ok {
		return code
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	workers, code, ok := getItems[core.WorkerInfo](inv, c, "/api/workers", nil, *jsonOut)
	if !ok {
		return code
	}
	now := inv.env.now()
	t := newTable("WORKER", "GPU", "NAME", "UTIL", "MEMORY", "RUN", "FOREIGN")
	n := 0
	for _, w := range workers {
		if w.GPUProblem != "" {
			fmt.Fprintf(inv.env.Stderr, "%s: %s\n", w.ID, fitWidth(w.GPUProblem, 200))
		}
		for _, g := range w.GPUs {
			n++
			util := "-"
			if g.Utilization != nil {
				util = fmt.Sprintf("%3d %%", *g.Utilization)
			}
			mem := fmt.Sprintf("- / %d MiB", g.MemoryMB)
			if g.MemoryUsedMB != nil {
				mem = fmt.Sprintf("%d / %d MiB", *g.MemoryUsedMB, g.MemoryMB)
			}
			run := orDash(g.TaskID)
			if len(g.Shares) > 0 {
				run = shareList(g.Shares)
			}
			if g.IdleSince != nil {
				run += " (idle " + age(now, *g.IdleSince) + ")"
			}
			t.rowf("%s\t%d\t%s\t%s\t%s\t%s\t%s\n", w.ID, g.Index, orDash(fitWidth(g.Name, 30)), util, mem, run, foreignList(g.Foreign))
		}
	}
	if err := inv.printTable(t); err != nil {
		return inv.fail(err)
	}
	if n == 0 {
		fmt.Fprintln(inv.env.Stderr, "no worker has GPUs: start one on a GPU machine with `rlsched worker`")
	}
	return ExitOK
}

// shareList is a shared GPU's runs: "r1 0.25 10 GiB, r2 0.5".
func shareList(shares []core.GPUShare) string {
	parts := make([]string, len(shares))
	for i, sh := range shares {
		parts[i] = fmt.Sprintf("%s %g", sh.TaskID, sh.Fraction)
		if sh.MemoryMB > 0 {
			parts[i] += " " + core.FormatMB(sh.MemoryMB)
		}
	}
	return strings.Join(parts, ", ")
}

// foreignList is "pid 4242 bob (python nb.py), pid 17" or "-".
func foreignList(procs []core.ForeignProc) string {
	if len(procs) == 0 {
		return "-"
	}
	parts := make([]string, len(procs))
	for i, p := range procs {
		s := fmt.Sprintf("pid %d", p.PID)
		if p.User != "" {
			s += " " + p.User
		}
		if p.Command != "" {
			s += " (" + fitWidth(p.Command, 40) + ")"
		}
		if p.MemoryMB != nil {
			s += fmt.Sprintf(" %d MiB", *p.MemoryMB)
		}
		parts[i] = s
	}
	return strings.Join(parts, ", ")
}
