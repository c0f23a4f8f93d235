package cli

import (
	"crypto/rand"
	"encoding/hex"
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
and log. It runs in a snapshot of your code, as rlsched submit's runs do: the tree of the
current directory (--code DIR: DIR's), started in the current directory's place in it;
--no-code sends none (then a command runs in the current directory of the worker). Without
a command it runs the login shell of its uid (in an image, --image NAME: its bash, else sh);
with one (after --) that command. While it waits, its place in the queue and why it waits
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
			"rlsched shell --gpus 1 --image pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
		},
		argv: true,
		run:  runShell,
	})
	register(&command{
		name:    "notebook",
		args:    "[flags] [-- COMMAND [ARG...]]",
		summary: "Queue a notebook (or any web app) on a worker and print its URL.",
		details: `The notebook is an interactive run like rlsched shell's, whose web app listens on --port on
its worker's loopback; the master proxies it at <server>/sessions/<id>/ for you only, signed
in by the same cookie as the dashboard. Without a command it runs JupyterLab (jupyter must
be on the run's PATH), with a token of its own in the printed URL; with one, that command, which must serve
under $RLSCHED_BASE_URL (/sessions/<id>/) on port $RLSCHED_PORT. The URL is printed once the
session runs (the app may take a few seconds more to listen). rlsched cancel ID ends it;
rlsched attach ID shows its terminal.`,
		examples: []string{
			"rlsched notebook --gpus 1 --time 4h",
			"rlsched notebook --port 8000 -- python3 app.py",
		},
		argv: true,
		run:  func(inv *invocation, args []string) int { return runSession(inv, args, true) },
	})
}

// detachHelp is the detach sequence as both commands' help says it.
const detachHelp = `Detach with Ctrl-] then d: the session goes on, and rlsched attach ID comes back to it
with its recent screen. Ctrl-] twice sends one Ctrl-]. A dropped connection is reattached
by itself.`

func runShell(inv *invocation, args []string) int { return runSession(inv, args, false) }

// runSession is rlsched shell, or with notebook rlsched notebook: the
// same flags and submission, a port and a default command for a notebook.
func runSession(inv *invocation, args []string, notebook bool) int {
	fs := inv.newFlags()
	var (
		gpus          float64
		cpus          float64
		memory, limit string
		noRecord      bool
		name, project string
		prio          int
		port          int
		noWait        bool
		req           submitRequest
		rf            runFlags // the code snapshot and Python env, as submit's
	)
	what := "session"
	fs.Float64Var(&gpus, "gpus", 0, "`N` GPUs the "+what+" needs: whole GPUs, or a fraction of one (0.25, 0.5)")
	fs.Float64Var(&cpus, "cpus", 0, "`N` CPU cores the "+what+" needs, fractions allowed (default: the master's)")
	fs.StringVar(&memory, "memory", "", "memory the "+what+" needs, `SIZE` such as 16GiB (default: the master's)")
	fs.StringVar(&limit, "time", "", "hard time limit, `DURATION` like 2h or SECONDS; warned 5 minutes before")
	fs.BoolVar(&noRecord, "no-record", false, "keep the terminal's output out of the run's log")
	fs.StringVar(&name, "name", "", "display `NAME` (default: shell, or the command)")
	fs.StringVar(&project, "project", "", "`PROJECT` to group runs")
	fs.IntVar(&prio, "priority", 0, "priority `N` (above 0: admins only)")
	rf.definePython(fs)
	defineImage(fs, &req)
	rf.defineCode(fs)
	if notebook {
		fs.IntVar(&port, "port", 8888, "`PORT` the app listens on, on the worker's loopback (its env has it as RLSCHED_PORT)")
		fs.BoolVar(&noWait, "no-wait", false, "print the URL at once instead of once the session runs")
	}
	p := fs.parse(args)
	if !p.help && p.problem == "" && len(p.pos) > 0 {
		return inv.usageError("unexpected argument %q: put the command to run after --, e.g. rlsched %s -- python3 -i", p.pos[0], map[bool]string{false: "shell", true: "notebook"}[notebook])
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
	var jupyterToken string
	if notebook {
		if port < 1 || port > 65535 {
			return inv.usageError("--port must be 1..65535")
		}
		req.Port = port
		if !p.dash {
			// Jupyter keeps its own token too: other runs on the worker
			// share its loopback (docs/interactive.md).
			jupyterToken = newNotebookToken()
			req.Command = defaultNotebook
			req.Workdir = inv.env.Dir
			req.Env = map[string]string{"JUPYTER_TOKEN": jupyterToken}
			if name == "" {
				req.Name = "notebook"
			}
		}
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
	if code, ok := inv.pythonEnv(fs, &rf, &req); !ok {
		return code
	}
	if code, ok := inv.checkImage(&req); !ok {
		return code
	}
	if code, ok := inv.codeRequest(fs, &rf, &req); !ok {
		return code
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	if err := inv.attachCode(c, &req, &rf, fs); err != nil {
		return inv.fail(err)
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
	if !notebook {
		return inv.waitAndAttach(c, ans.ID)
	}
	u := c.base + core.SessionPath(ans.ID)
	if jupyterToken != "" {
		u += "lab?token=" + jupyterToken
	}
	if !noWait {
		if code, ok := inv.waitRunning(c, ans.ID, ""); !ok {
			return code
		}
	}
	fmt.Fprintln(inv.env.Stdout, u)
	fmt.Fprintf(inv.env.Stderr, "open it in a browser signed in to %s (only you may); `rlsched cancel %s` ends it\n", c.base, ans.ID)
	return ExitOK
}

// defaultNotebook is rlsched notebook's command without one: JupyterLab
// on the session's port and base path (a shell only expands them: the
// run's own argv, as any user's command). allow_remote_access: the proxy
// sends the browser's Host, which Jupyter would refuse as not local; it
// still listens on the loopback only, behind its token.
var defaultNotebook = []string{"sh", "-c", `exec jupyter lab --no-browser --ip=127.0.0.1 --port="$RLSCHED_PORT" --ServerApp.base_url="$RLSCHED_BASE_URL" --ServerApp.allow_remote_access=True`}

func newNotebookToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// waitRunning waits for session id to run, showing its place in the
// queue; ok false (with the exit code) when it ended or waiting failed.
func (inv *invocation) waitRunning(c *client, id, hint string) (int, bool) {
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
			fmt.Fprintf(inv.env.Stderr, "  stopped waiting; session %s stays queued: %s`rlsched cancel %s` drops it\n", id, hint, id)
		}
		return code, false
	}
	if t.Status.Terminal() {
		inv.summary(t, inv.env.now().Sub(start))
		return ExitError, false
	}
	return ExitOK, true
}

// waitAndAttach waits for session id to run, showing its place in the
// queue, then attaches to it.
func (inv *invocation) waitAndAttach(c *client, id string) int {
	if code, ok := inv.waitRunning(c, id, "`rlsched attach "+id+"` once it runs, "); !ok {
		return code
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
