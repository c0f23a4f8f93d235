package cli

import (
	"bytes"
	"fmt"

	"github.com/rlsched/rlsched/core"
)

func init() {
	register(&command{
		name:    "workers",
		args:    "[--json]",
		summary: "List the workers: state, GPUs in use, running runs, last heartbeat.",
		run:     runWorkers,
	})
}

func runWorkers(inv *invocation, args []string) int {
	fs := inv.newFlags()
	jsonOut := fs.Bool("json", false, "print the server's JSON")
	if _, code, ok := inv.start(args, 0, 0); !ok {
		return code
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	var ans struct {
		Items []core.WorkerInfo `json:"items"`
	}
	raw, err := c.getJSON(inv.ctx, "/api/workers", nil, &ans)
	if err != nil {
		return inv.fail(err)
	}
	if *jsonOut {
		return inv.printJSON(raw)
	}
	now := inv.env.now()
	var b bytes.Buffer
	tw := newTable(&b)
	fmt.Fprintln(tw, "ID\tSTATE\tHOST\tGPUS\tSLOTS\tRUNNING\tLAST HEARTBEAT")
	for _, w := range ans.Items {
		used := 0
		for _, g := range w.GPUs {
			if g.TaskID != "" {
				used++
			}
		}
		hb := "never"
		if !w.LastHeartbeatAt.IsZero() {
			hb = age(now, w.LastHeartbeatAt) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%d\t%s\n", w.ID, orDash(string(w.State)),
			orDash(truncate(w.Host, 40)), used, len(w.GPUs), w.Slots, len(w.RunningTasks), hb)
	}
	tw.Flush()
	if _, err := inv.env.Stdout.Write(b.Bytes()); err != nil {
		return inv.fail(err)
	}
	if len(ans.Items) == 0 {
		fmt.Fprintln(inv.env.Stderr, "no workers have joined yet: start one with `rlsched worker`")
	}
	return ExitOK
}
