package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/rlsched/rlsched/core"
)

func init() {
	register(&command{
		name:    "queue",
		args:    "[--limit N] [--json]",
		summary: "List the queued runs in the order the scheduler serves them, each with why it waits.",
		details: "The order is priority (higher first), then the owner's recent GPU usage (fair share:\n" +
			"lighter users first), then age. CODE is the pendingCode: resources (no worker has that\n" +
			"much free now), no_worker (none could ever fit it), quota, priority (runs ahead take what\n" +
			"it would fit in), sweep_limit. Runs being placed show position 0.",
		examples: []string{"rlsched queue", "rlsched queue --limit 20 --json"},
		run:      runQueue,
	})
	register(&command{
		name:    "quota",
		args:    "ls [--json] | set USER [--gpus N|none] [--runs M|none]",
		summary: "Show every user's usage and quota; admins set a user's caps on active GPUs and runs.",
		details: "ls shows each user's fair-share usage (GPU hours, decayed), what they have active\n" +
			"(DISPATCHED + RUNNING) and the quota that applies (DEFAULT_USER_GPU_QUOTA for a user\n" +
			"without a GPU quota). set replaces the user's quota: a cap left out, or none, is no cap;\n" +
			"0 lets none start.",
		examples: []string{"rlsched quota ls", "rlsched quota set alice --gpus 4 --runs 10", "rlsched quota set alice --gpus none"},
		run:      runQuota,
	})
}

func runQueue(inv *invocation, args []string) int {
	fs := inv.newFlags()
	limit := fs.Int("limit", 0, "at most `N` runs (default the server's, 500)")
	jsonOut := fs.Bool("json", false, "print the server's JSON")
	if _, code, ok := inv.start(args, 0, 0); !ok {
		return code
	}
	if *limit < 0 {
		return inv.usageError("--limit must be positive")
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	var q url.Values
	if *limit > 0 {
		q = url.Values{"limit": {strconv.Itoa(*limit)}}
	}
	queued, code, ok := getItems[core.QueueItem](inv, c, "/api/queue", q, *jsonOut)
	if !ok {
		return code
	}
	now := inv.env.now()
	t := newTable("POS", "ID", "USER", "GPUS", "PRIO", "WAITING", "CODE", "REASON")
	for _, e := range queued {
		waited := "-"
		if t, err := time.Parse(time.RFC3339Nano, e.CreatedAt); err == nil {
			waited = age(now, t)
		}
		t.rowf("%d\t%s\t%s\t%g\t%d\t%s\t%s\t%s\n", e.Position, e.ID, e.User, e.GPUs, e.Priority,
			waited, orDash(e.PendingCode), fitWidth(e.PendingReason, 120))
	}
	if err := inv.printTable(t); err != nil {
		return inv.fail(err)
	}
	if len(queued) == 0 {
		fmt.Fprintln(inv.env.Stderr, "no runs are queued")
	}
	return ExitOK
}

// capFlag is --gpus or --runs of quota set: a count, or none (no cap).
type capFlag struct {
	set bool
	n   *int
}

func (f *capFlag) String() string {
	if f.n == nil {
		return "none"
	}
	return strconv.Itoa(*f.n)
}

func (f *capFlag) Set(v string) error {
	f.set = true
	if v == "none" {
		f.n = nil
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("want a count ≥ 0 or none")
	}
	f.n = &n
	return nil
}

func runQuota(inv *invocation, args []string) int {
	fs := inv.newFlags()
	var gpus, runs capFlag
	fs.Var(&gpus, "gpus", "most active GPUs, `N` or none (set)")
	fs.Var(&runs, "runs", "most active runs, `M` or none (set)")
	jsonOut := fs.Bool("json", false, "print the server's JSON (ls)")
	p, code, ok := inv.start(args, 1, 2)
	if !ok {
		return code
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	switch op := p.pos[0]; {
	case op == "ls" && len(p.pos) == 1:
		if gpus.set || runs.set {
			return inv.usageError("--gpus and --runs are for set")
		}
		return inv.quotaList(c, *jsonOut)
	case op == "set" && len(p.pos) == 2:
		if !gpus.set && !runs.set {
			return inv.usageError("give --gpus and/or --runs (a count, or none)")
		}
		if !core.ValidUsername(p.pos[1]) {
			return inv.usageError("invalid username %q", p.pos[1])
		}
		return inv.quotaSet(c, p.pos[1], gpus.n, runs.n)
	}
	return inv.usageError("use `quota ls` or `quota set USER --gpus N --runs M`")
}

func (inv *invocation) quotaList(c *client, jsonOut bool) int {
	users, code, ok := getItems[core.UserUsage](inv, c, "/api/users/usage", nil, jsonOut)
	if !ok {
		return code
	}
	capOf := func(p *int) string {
		if p == nil {
			return "-"
		}
		return strconv.Itoa(*p)
	}
	t := newTable("USER", "USAGE (GPU H)", "ACTIVE GPUS", "ACTIVE RUNS", "GPU QUOTA", "RUN QUOTA")
	for _, u := range users {
		t.rowf("%s\t%.2f\t%d\t%d\t%s\t%s\n", u.User, u.Usage/3600, u.RunningGPUs, u.RunningRuns,
			capOf(u.Quota.GPUs), capOf(u.Quota.Runs))
	}
	if err := inv.printTable(t); err != nil {
		return inv.fail(err)
	}
	return ExitOK
}

func (inv *invocation) quotaSet(c *client, user string, gpus, runs *int) int {
	body := map[string]*int{"gpus": gpus, "runs": runs}
	resp, err := c.do(inv.ctx, http.MethodPut, "/api/admin/quotas/"+url.PathEscape(user), nil, body, "")
	if err != nil {
		return inv.fail(adminHint(err))
	}
	var q struct {
		User string `json:"user"`
		GPUs *int   `json:"gpus"`
		Runs *int   `json:"runs"`
	}
	if err := decodeInto(resp.body, &q, "/api/admin/quotas"); err != nil {
		return inv.fail(err)
	}
	show := func(p *int) string {
		if p == nil {
			return "no cap"
		}
		return strconv.Itoa(*p)
	}
	fmt.Fprintf(inv.env.Stdout, "%s: GPUs %s, runs %s\n", q.User, show(q.GPUs), show(q.Runs))
	return ExitOK
}
