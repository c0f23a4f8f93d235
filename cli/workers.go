package cli

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/rlsched/rlsched/core"
)

func init() {
	register(&command{
		name:    "workers",
		args:    "[--json] | drain ID | undrain ID | forget ID",
		summary: "List the workers (state, GPUs in use, runs, when last heard); admins drain, undrain, forget.",
		details: "drain: the worker finishes its runs and takes no new ones (DRAINING) until undrain, also\n" +
			"after a restart: drain it, wait until `rlsched workers` shows it with no runs, then stop\n" +
			"or upgrade it. forget: a DOWN worker leaves the list (it also does by itself after\n" +
			"WORKER_FORGET_SECONDS); it is listed again when it comes back. SILENT (the API's PENDING):\n" +
			"the worker lost its connection and still holds runs; they are requeued when their leases\n" +
			"end unless it returns (`rlsched show RUN` says when), or at once when it returns without them.",
		examples: []string{"rlsched workers", "rlsched workers drain gpu1-3f9a2c", "rlsched workers forget gpu9-77aa01"},
		run:      runWorkers,
	})
}

func runWorkers(inv *invocation, args []string) int {
	fs := inv.newFlags()
	jsonOut := fs.Bool("json", false, "print the server's JSON")
	p, code, ok := inv.start(args, 0, 2)
	if !ok {
		return code
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	if len(p.pos) > 0 {
		return inv.workerAdmin(c, p.pos)
	}
	workers, code, ok := getItems[core.WorkerInfo](inv, c, "/api/workers", nil, *jsonOut)
	if !ok {
		return code
	}
	now := inv.env.now()
	t := newTable("ID", "STATE", "HOST", "GPUS", "SLOTS", "CPUS", "MEMORY", "ENFORCED", "RUNNING", "LAST HEARD")
	for _, w := range workers {
		used := 0
		for _, g := range w.GPUs {
			if g.TaskID != "" || len(g.Shares) > 0 { // shared: busy for whole-GPU runs
				used++
			}
		}
		hb := "never"
		if !w.LastHeartbeatAt.IsZero() {
			hb = age(now, w.LastHeartbeatAt) + " ago"
		}
		state := string(w.State)
		if w.State == core.WorkerPending {
			// The API's PENDING: it lost its session and still holds runs,
			// which wait for it until their leases end (each run says when).
			state = "SILENT"
		}
		t.rowf("%s\t%s\t%s\t%d/%d\t%d\t%s\t%s\t%s\t%d\t%s\n", w.ID, orDash(state),
			orDash(fitWidth(w.Host, 40)), used, len(w.GPUs), w.Slots, workerCPUs(w), workerMemory(w), orDash(w.Enforcement),
			len(w.RunningTasks), hb)
	}
	for _, w := range workers {
		if w.EnforcementWarning != "" {
			fmt.Fprintf(inv.env.Stderr, "warning: %s does not enforce its runs' limits: %s\n", w.ID, oneLine(w.EnforcementWarning))
		}
	}
	if err := inv.printTable(t); err != nil {
		return inv.fail(err)
	}
	if len(workers) == 0 {
		fmt.Fprintln(inv.env.Stderr, "no workers have joined yet: start one with `rlsched worker`")
	}
	return ExitOK
}

// workerCPUs and workerMemory are a worker's cores and memory as used/
// offered ("1.5/8", "4 GiB/16 GiB"); "-/-" when it offers no count (no
// limit is placed on it).
func workerCPUs(w core.WorkerInfo) string {
	if w.CPUs <= 0 {
		return "-"
	}
	return core.FormatCPUs(w.CPUsUsed) + "/" + core.FormatCPUs(w.CPUs)
}

func workerMemory(w core.WorkerInfo) string {
	if w.MemoryMB <= 0 {
		return "-"
	}
	return core.FormatMB(w.MemoryMBUsed) + "/" + core.FormatMB(w.MemoryMB)
}

// workerAdmin is drain, undrain or forget of one worker.
func (inv *invocation) workerAdmin(c *client, pos []string) int {
	if len(pos) != 2 {
		return inv.usageError("give an operation and a worker id: drain ID, undrain ID or forget ID")
	}
	op, id := pos[0], pos[1]
	if !core.ValidWorkerID(id) {
		return inv.usageError("invalid worker id %q", id)
	}
	path := "/api/workers/" + url.PathEscape(id)
	method := http.MethodDelete
	switch op {
	case "drain":
		method, path = http.MethodPost, path+"/drain"
	case "undrain":
		path += "/drain"
	case "forget":
	default:
		return inv.usageError("unknown operation %q: use drain, undrain or forget", op)
	}
	resp, err := c.do(inv.ctx, method, path, nil, nil, "")
	if err != nil {
		if ae, ok := err.(*apiError); ok && ae.Status == http.StatusNotFound {
			ae.Hint = "list the workers with `rlsched workers`"
		}
		return inv.fail(adminHint(err))
	}
	if op == "forget" {
		fmt.Fprintf(inv.env.Stdout, "forgot %s\n", id)
		return ExitOK
	}
	var w core.WorkerInfo
	if err := decodeInto(resp.body, &w, path); err != nil {
		return inv.fail(err)
	}
	fmt.Fprintf(inv.env.Stdout, "%s: %s, %d run(s)\n", w.ID, w.State, len(w.RunningTasks))
	return ExitOK
}
