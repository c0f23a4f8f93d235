package cli

import (
	"fmt"
	"math"
	"time"

	"github.com/rlsched/rlsched/core"
)

// `rlsched shell` queues an interactive run (kind "interactive") through
// the normal submit path, waits for it to start and attaches the terminal
// (attach.go); `rlsched attach ID` attaches to a running one.

func init() {
	register(&command{
		name:    "shell",
		args:    "[flags] [-- COMMAND [ARG...]]",
		summary: "Queue an interactive session (a shell on a worker) and attach to it.",
		details: `The session is a run of kind "interactive", queued like any other: fair share, quotas,
priority and placement apply, and it gets its own uid, limits, GPUs (CUDA_VISIBLE_DEVICES)
and log. Without a command it runs the login shell of its uid; with one (after --) that
command, in the current directory. While it waits, its place in the queue and why it waits
are shown; once it runs your terminal is attached to it.

` + detachHelp + `

--time is a hard limit: the terminal is warned 5 minutes before, then the session is
stopped (SIGTERM, a grace, SIGKILL) and ends TIMEOUT. --no-record keeps the terminal's
output out of the run's log (a note line says so). Exiting the shell ends the run; its exit
code is this command's (0: SUCCEEDED).`,
		examples: []string{
			"rlsched shell --gpus 1 --time 2h",
			"rlsched shell --cpus 4 --memory 16GiB -- python3 -i",
			"rlsched shell --no-record -- htop",
		},
		argv: true,
		run:  runShell,
	})
}

// detachHelp is the detach sequence as both commands' help says it.
const detachHelp = `Detach with Ctrl-] then d: the session goes on, and rlsched attach ID comes back to it
with its recent screen. Ctrl-] twice sends one Ctrl-]. A dropped connection is reattached
by itself.`

func runShell(inv *invocation, args []string) int {
	fs := inv.newFlags()
	var (
		gpus          float64
		cpus          float64
		memory, limit string
		noRecord      bool
		name, project string
		prio          int
		req           submitRequest
	)
	fs.Float64Var(&gpus, "gpus", 0, "`N` GPUs the session needs: whole GPUs, or a fraction of one (0.25, 0.5)")
	fs.Float64Var(&cpus, "cpus", 0, "`N` CPU cores the session needs, fractions allowed (default: the master's)")
	fs.StringVar(&memory, "memory", "", "memory the session needs, `SIZE` such as 16GiB (default: the master's)")
	fs.StringVar(&limit, "time", "", "hard time limit, `DURATION` like 2h or SECONDS; warned 5 minutes before")
	fs.BoolVar(&noRecord, "no-record", false, "keep the terminal's output out of the run's log")
	fs.StringVar(&name, "name", "", "display `NAME` (default: shell, or the command)")
	fs.StringVar(&project, "project", "", "`PROJECT` to group runs")
	fs.IntVar(&prio, "priority", 0, "priority `N` (above 0: admins only)")
	p := fs.parse(args)
	if !p.help && p.problem == "" && len(p.pos) > 0 {
		return inv.usageError("unexpected argument %q: put the command to run after --, e.g. rlsched shell -- python3 -i", p.pos[0])
	}
	p, code, ok := inv.startParsed(p, 0, 0)
	if !ok {
		return code
	}
	if p.dash && len(p.rest) == 0 {
		return inv.usageError("empty command after --")
	}
	req.Kind = core.KindInteractive
	req.Name, req.Project = name, project
	if p.dash {
		req.Command = p.rest
		req.Workdir = inv.env.Dir
	}
	if fs.isSet("gpus") {
		if gpus < 0 {
			return inv.usageError("--gpus must not be negative")
		}
		req.GPUs = &gpus
	}
	if fs.isSet("priority") {
		req.Priority = &prio
	}
	if fs.isSet("cpus") {
		if !(cpus > 0) || math.IsInf(cpus, 0) {
			return inv.usageError("--cpus must be a positive number of cores, e.g. 4 or 0.5")
		}
		req.CPUs = &cpus
	}
	if fs.isSet("memory") {
		mb, err := parseMemory(memory)
		if err != nil {
			return inv.usageError("%v", err)
		}
		req.MemoryMB = &mb
	}
	if fs.isSet("time") {
		secs, err := parseTimeout(limit)
		if err != nil {
			return inv.usageError("--time: %v", err)
		}
		req.TimeoutSeconds = &secs
	}
	if noRecord {
		off := false
		req.Record = &off
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	var ans submitAnswer
	raw, err := c.postJSON(inv.ctx, "/api/train", req, &ans)
	if err != nil {
		return inv.fail(err)
	}
	if ans.ID == "" {
		return inv.fail(fmt.Errorf("the server accepted the session but sent no id: %s", fitWidth(string(raw), 200)))
	}
	fmt.Fprintf(inv.env.Stderr, "session %s queued\n", ans.ID)
	return inv.waitAndAttach(c, ans.ID)
}

// waitAndAttach waits for session id to run, showing its place in the
// queue, then attaches to it.
func (inv *invocation) waitAndAttach(c *client, id string) int {
	start := inv.env.now()
	var t core.Task
	err := inv.poll(c, true, func() (string, bool, error) {
		var err error
		if t, _, err = c.getTask(inv.ctx, id); err != nil {
			return "", false, err
		}
		return queueLine(t, inv.env.now().Sub(start)), t.Status == core.StatusRunning || t.Status.Terminal(), nil
	})
	if err != nil {
		code := inv.fail(err)
		if interrupted(err) {
			fmt.Fprintf(inv.env.Stderr, "  stopped waiting; session %s stays queued: `rlsched attach %s` once it runs, `rlsched cancel %s` drops it\n", id, id, id)
		}
		return code
	}
	if t.Status.Terminal() {
		inv.summary(t, inv.env.now().Sub(start))
		return ExitError
	}
	return inv.attach(c, id)
}

// queueLine is the progress line of a session that waits: its status, and
// while QUEUED its place and why it waits.
func queueLine(t core.Task, elapsed time.Duration) string {
	line := fmt.Sprintf("%s %s", t.ID, t.Status)
	if t.Status == core.StatusQueued && t.QueuePosition > 0 {
		line += fmt.Sprintf(", position %d", t.QueuePosition)
		if t.PendingCode != "" {
			line += " (" + t.PendingCode + ")"
		}
		if t.PendingReason != "" {
			line += ": " + t.PendingReason
		}
	}
	return line + " " + clock(elapsed)
}
